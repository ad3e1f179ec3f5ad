package sluice

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// TestLockOrderDoc: the lock order in the package doc names lockrank's ranks,
// in lockrank's order, so the comment cannot drift from what is checked.
func TestLockOrderDoc(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rank := regexp.MustCompile(`^//\t([A-Z][A-Za-z]*) {2,}`)
	for _, line := range strings.Split(string(src), "\n") {
		if m := rank.FindStringSubmatch(line); m != nil {
			got = append(got, m[1])
		}
	}
	if want := lockrank.Names(); !slices.Equal(got, want) {
		t.Fatalf("doc.go lists the ranks\n\t%v\nlockrank has\n\t%v", got, want)
	}
}
