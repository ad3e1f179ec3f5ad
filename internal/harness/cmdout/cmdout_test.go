package cmdout

import "testing"

func TestFirstLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"one\n\n  two  \nthree\nfour\n", 3, "one / two / three"},
		{"\n\nonly\n", 2, "only"},
	} {
		if got := FirstLines(c.in, c.n); got != c.want {
			t.Errorf("FirstLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
