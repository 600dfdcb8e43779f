package outfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCreateRefusesALink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "trace.jsonl")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(link, []byte("overwritten"))
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("WriteFile through a link: got %v, want an error saying it is a symbolic link", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target now holds %q: it was written through the link", b)
	}
}

func TestCreateTruncatesAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "summary.json")
	if err := WriteFile(p, []byte("a longer first version")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "short" {
		t.Errorf("got %q, want the second write alone", b)
	}
}
