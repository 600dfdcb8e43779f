package spans

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// FuzzAppendString checks that any string is written as encoding/json
// writes it (HTML characters unescaped, each byte of invalid UTF-8 as
// U+FFFD); otelsetup's FuzzTraceFileString checks a whole line.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{
		"", "plain", `"quoted"`, `back\slash`, "/slash", "<html> & 'apos'",
		"\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f", "ünïcode ☃ 😀", "\u2028 line \u2029 para", "\ufffd",
		"\xff", "bad \xc3\x28 seq", "cut \xe2\x82", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 above U+10FFFF",
		"overlong \xc0\xaf", strings.Repeat("long ", 1000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var enc bytes.Buffer
		je := json.NewEncoder(&enc)
		je.SetEscapeHTML(false)
		if err := je.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got, want := appendString(nil, s), bytes.TrimSuffix(enc.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// TestNewSharedAttributes: NewSharedAttributes keeps the SDK's rules (an
// invalid attribute left out, a key given twice kept where it first
// appears, with its last value).
func TestNewSharedAttributes(t *testing.T) {
	a := NewSharedAttributes(attribute.String("a", "1"), attribute.KeyValue{}, attribute.Int("b", 2), attribute.String("a", "last"))
	if got, want := a.KeyValues(), []attribute.KeyValue{attribute.String("a", "last"), attribute.Int("b", 2)}; !slices.Equal(got, want) {
		t.Errorf("NewSharedAttributes: %v, want %v", got, want)
	}
	if a.Len() != 2 || !a.Has("b") || a.Has("c") {
		t.Errorf("Len %d, Has(b) %v, Has(c) %v: want 2, true, false", a.Len(), a.Has("b"), a.Has("c"))
	}
	var none *SharedAttributes
	if none.Len() != 0 || none.Has("a") || none.KeyValues() != nil {
		t.Error("a nil SharedAttributes is not empty")
	}
	// Appending to KeyValues leaves the shared list alone.
	_ = append(a.KeyValues(), attribute.Int("c", 3))
	if got := a.KeyValues(); len(got) != 2 {
		t.Errorf("after an append to KeyValues: %v", got)
	}
}

// TestPlain8: every byte value at every position of the eight, among
// plain bytes and among bytes that are themselves just plain (0x20, 0x7f,
// the neighbours of '"' and '\\'), is told apart as a byte-by-byte look
// tells it: the word tricks' borrows must not hide or invent one.
func TestPlain8(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	for _, fill := range []byte{'a', 0x20, 0x7f, '"' + 1, '"' - 1, '\\' + 1, '\\' - 1} {
		for pos := range 8 {
			for v := range 256 {
				w := []byte(strings.Repeat(string(fill), 8))
				w[pos] = byte(v)
				if got, want := plain8(string(w)), plain(byte(v)); got != want {
					t.Fatalf("plain8(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

// TestAllAttributesOwnSlice: the attributes of a span that leads with
// shared ones come in a slice of its own, so that a span processor that
// changes them does not change every span's.
func TestAllAttributesOwnSlice(t *testing.T) {
	lead := NewSharedAttributes(attribute.String("a", "1"))
	s := Record{Leading: lead}
	s.AllAttributes()[0] = attribute.String("a", "changed")
	if got := lead.KeyValues()[0].Value.AsString(); got != "1" {
		t.Fatalf("changing a span's attributes changed the shared ones: %q", got)
	}
}
