// Package cmdout shortens what an external command printed (fio, mkfs.xfs,
// umount, losetup) for an error message.
package cmdout

import "strings"

// FirstLines returns the first n non-empty lines of s, trimmed and joined
// with " / ".
func FirstLines(s string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
			if len(out) == n {
				break
			}
		}
	}
	return strings.Join(out, " / ")
}
