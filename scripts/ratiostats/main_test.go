package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSetAndPool(t *testing.T) {
	pooled := filepath.Join(t.TempDir(), "pooled")
	var out bytes.Buffer
	// Two sets: ratios whose logs cancel (geomean 1) and a constant 1.1.
	if err := run([]string{"set", "thr", "on/off", pooled}, strings.NewReader("0.9090909090909091\n1.1\n"), &out); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"set", "thr", "on/off", pooled}, strings.NewReader("1.1\n1.1\n1.1\n"), &out); err != nil {
		t.Fatal(err)
	}
	want := "thr                            on/off: median 1.005  min 0.909  max 1.100  geomean 1.000 [0.298, 3.357] 95%  (n=2)\n" +
		"thr                            on/off: median 1.100  min 1.100  max 1.100  geomean 1.100 [1.100, 1.100] 95%  (n=3)\n"
	if out.String() != want {
		t.Errorf("set printed\n%s\nwant\n%s", out.String(), want)
	}
	f, err := os.Open(pooled)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out.Reset()
	if err := run([]string{"pool"}, f, &out); err != nil {
		t.Fatal(err)
	}
	// Mean logs 0 and log 1.1 over two sets: pooled sqrt(1.1) = 1.049.
	if got := out.String(); !strings.HasPrefix(got, "thr                            on/off: sets 1.000 .. 1.100  pooled 1.049 [") || !strings.HasSuffix(got, "(sets=2)\n") {
		t.Errorf("pool printed %q", got)
	}
}

func TestBadInput(t *testing.T) {
	pooled := filepath.Join(t.TempDir(), "pooled")
	for _, c := range []struct {
		args []string
		in   string
		want string
	}{
		{[]string{"set", "a", "b", pooled}, "", "no ratios"},
		{[]string{"set", "a", "b", pooled}, "1.0\nx\n", "line 2"},
		{[]string{"set", "a", "b", pooled}, "0\n", "finite positive"},
		{[]string{"set", "a", "b", pooled}, strings.Repeat("1", maxLine+1), "longer than"},
		{[]string{"pool"}, "a\tb\n", "NAME"},
		{[]string{"pool"}, "a\tb\tNaN\n", "not a finite"},
		{[]string{"nope"}, "", "usage"},
	} {
		err := run(c.args, strings.NewReader(c.in), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%v, %.20q) = %v, want an error with %q", c.args, c.in, err, c.want)
		}
	}
}
