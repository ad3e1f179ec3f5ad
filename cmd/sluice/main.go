// Command sluice makes, serves, checks and benchmarks sluice volumes.
//
//	sluice mkfs VOLUME --size SIZE    create a volume
//	sluice mount VOLUME DIR           serve it through FUSE (creates it on first use)
//	sluice umount DIR                 unmount it
//	sluice stat VOLUME                show the header and space usage
//	sluice fsck VOLUME                check its consistency
//	sluice bench                      reproduce the seed experiments
//
// Each subcommand lives in its own file and registers itself in init.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string
	usage   string // arguments, e.g. "VOLUME --size SIZE"
	summary string
	// run parses args (after the subcommand name) and does the work. It
	// writes results to stdout; errors are returned, and printed by main
	// as one line.
	run func(args []string, stdout io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// exitError carries a specific exit status (fsck exits 1 on problems).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// usageError marks a command-line mistake: main prints the usage line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n", args[0])
		printUsage(stderr)
		return 2
	}
	err := c.run(args[1:], stdout)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "sluice %s: %s\nusage: sluice %s %s\n", c.name, ue.msg, c.name, c.usage)
		return 2
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(stderr, "sluice %s: %s\n", c.name, oneLine(ee.err))
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "sluice %s: %s\n", c.name, oneLine(err))
	return 1
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice COMMAND [ARGS]")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  %-8s %-36s %s\n", n, c.usage, c.summary)
	}
}

// oneLine flattens an error message to one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}

// newFlags returns a flag set that reports errors instead of exiting, and
// parseInterspersed parses flags that may come before or after the
// positional arguments (sluice mkfs VOLUME --size 1G).
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
