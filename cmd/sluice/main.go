// Command sluice makes, serves, checks and benchmarks sluice volumes.
//
//	sluice mkfs VOLUME --size SIZE    create a volume
//	sluice mount VOLUME DIR           serve it through FUSE (creates it on first use)
//	sluice umount DIR                 unmount it
//	sluice stat VOLUME                show the header and space usage
//	sluice fsck VOLUME                check its consistency
//	sluice scrub VOLUME               read and verify every written block (online too)
//	sluice bench                      reproduce the seed experiments
//	sluice completion bash|zsh|fish   print a shell completion script
//
// The command line is github.com/spf13/cobra's: `sluice COMMAND --help`
// prints a command's usage and its flags with their defaults, and flags
// may come before or after the positional arguments. Long flags may also
// be written with one dash (-size 16G), as the standard flag package the
// command used before accepted them (goStyleFlags).
//
// Exit statuses: 0 success (and --help); 1 a refusal, or fsck found
// problems, or scrub damaged blocks; 2 a command-line mistake, reported as
// the problem and the command's usage line; 8 fsck or scrub could not check
// the volume.
//
// Each subcommand lives in its own file as a constructor (newMkfsCommand,
// ...) that newRootCommand calls. Every run builds a fresh command tree, so
// that no flag value outlives the run (the tests call run many times in
// one process).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exitError carries a specific exit status (fsck exits 1 on problems) and
// a message for stderr, printed whatever the status (scrub exits 0 with a
// note for a volume without data checksums).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// usageError marks a command-line mistake: run prints the usage line and
// exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (without the program name), writing
// results and help to stdout and errors to stderr, and returns the exit
// status.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(args, stdout, stderr)
	if len(args) == 0 {
		fmt.Fprint(stderr, root.UsageString())
		return 2
	}
	root.SetArgs(goStyleFlags(root, args))
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	// The root only dispatches: whatever it refuses (an unknown command or
	// flag) is a usage error, answered with the list of commands.
	if cmd == nil || !cmd.HasParent() {
		fmt.Fprintf(stderr, "sluice: %s\n%s", oneLine(err), root.UsageString())
		return 2
	}
	name := cmd.CommandPath()
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "%s: %s\nusage: %s\n", name, oneLine(err), cmd.UseLine())
		return 2
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(stderr, "%s: %s\n", name, oneLine(ee.err))
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, oneLine(err))
	return 1
}

// newRootCommand builds the command tree, writing output and help to
// stdout and errors to stderr. args is the command line as given, which
// bench records in its report.
func newRootCommand(args []string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "make, serve, check and benchmark sluice volumes",
		Long: `sluice makes, serves, checks and benchmarks sluice volumes: user-space file systems
for highly concurrent direct and asynchronous I/O.

Flags go before or after the positional arguments; long flags may also be written
with one dash (-size 16G). Exit status: 0 success, 1 a refusal (fsck: problems
found; scrub: damaged blocks), 2 a command-line mistake, 8 fsck or scrub could
not check the volume.`,
		SilenceErrors: true, // run prints them, as one line
		SilenceUsage:  true,
	}
	// Before the completion command is added: it takes its writer then.
	root.SetOut(stdout)
	root.SetErr(stderr)
	var benchArgs []string
	if len(args) > 0 && args[0] == "bench" {
		benchArgs = args[1:]
	}
	root.AddCommand(
		newMkfsCommand(),
		newMountCommand(),
		newUmountCommand(),
		newStatCommand(),
		newFsckCommand(),
		newScrubCommand(),
		newFiemapCommand(),
		newBenchCommand(benchArgs),
	)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err.Error()}
	})
	// Add cobra's help and completion commands now (ExecuteC would add
	// them later) so that the walk below sees them too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		// Usage lines are written out in Use, flags included.
		c.DisableFlagsInUseLine = true
		c.Flags().SortFlags = false
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				err := check(cmd, args)
				var ue *usageError
				if err != nil && !errors.As(err, &ue) {
					return &usageError{err.Error()}
				}
				return err
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	// cobra's completion command only groups the shells: without a
	// RunE it would print its help and exit 0 for "completion bashy".
	for _, c := range root.Commands() {
		if c.Name() == "completion" && !c.Runnable() {
			c.Use = "completion bash|fish|powershell|zsh"
			c.RunE = func(*cobra.Command, []string) error {
				return &usageError{"expected a shell: bash, fish, powershell or zsh"}
			}
		}
	}
	return root
}

// wantArgs accepts exactly n positional arguments, and otherwise says
// which were expected.
func wantArgs(n int, expected string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{"expected " + expected}
		}
		return nil
	}
}

// completeWords completes a flag's value from a fixed list.
func completeWords(words ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp)
}

// goStyleFlags rewrites the flags that the standard flag package, which
// sluice used before cobra, accepted and pflag does not: a long flag with
// one dash (-size 16G, -json) and a one-letter flag with two (--o ro). Only
// the subcommand's own flags are rewritten, the value of a flag that takes
// one is left alone (--duration -1s), and so is everything after "--".
// The result is never nil: cobra reads os.Args when given nil.
func goStyleFlags(root *cobra.Command, args []string) []string {
	out := append(make([]string, 0, len(args)), args...)
	if len(args) == 0 {
		return out
	}
	var sub *cobra.Command
	for _, c := range root.Commands() {
		if c.Name() == args[0] || c.HasAlias(args[0]) {
			sub = c
		}
	}
	if sub == nil {
		return out
	}
	sub.InitDefaultHelpFlag()
	fl := sub.Flags()
	for i := 1; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue // a positional argument, or "-"
		}
		var f *pflag.Flag
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch twoDashes := strings.HasPrefix(a, "--"); {
		case !twoDashes && len(name) > 1:
			if f = fl.Lookup(name); f != nil {
				out[i] = "-" + a
			} else {
				hasValue = true // -oro: the shorthand -o with its value
			}
		case !twoDashes && len(name) == 1:
			f = fl.ShorthandLookup(name)
		case twoDashes && len(name) == 1:
			if f = fl.ShorthandLookup(name); f != nil {
				out[i] = a[1:]
			}
		default:
			f = fl.Lookup(name)
		}
		if f != nil && !hasValue && f.NoOptDefVal == "" {
			i++ // the next argument is this flag's value
		}
	}
	return out
}

// oneLine flattens an error message to one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}
