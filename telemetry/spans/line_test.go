package spans

import (
	"bytes"
	"testing"
)

// TestLineLenSize: a Line counts the spans it holds and the bytes of
// their encoding (what a caller bounds a line by before it writes it),
// the commas between spans of one group included, across resources and
// scopes; Reset empties it.
func TestLineLenSize(t *testing.T) {
	var l Line
	a, b, c := fileSpan("a", true), fileSpan("bb", true), fileSpan("ccc", true)
	c.Scope = Scope{Name: "other"}
	l.Add(&a)
	l.Add(&b)
	l.Add(&c)
	want := len(appendSpan(nil, &a)) + 1 + len(appendSpan(nil, &b)) + len(appendSpan(nil, &c))
	if l.Len() != 3 || l.Size() != want {
		t.Errorf("Len, Size = %d, %d; want 3, %d", l.Len(), l.Size(), want)
	}
	var out bytes.Buffer
	if err := NewFileWriter(&out, nil).WriteLine(&l); err != nil {
		t.Fatal(err)
	}
	if out.Len() <= want {
		t.Errorf("the line written is %d bytes, want more than its spans' %d", out.Len(), want)
	}
	l.Add(&a)
	l.Reset()
	if l.Len() != 0 || l.Size() != 0 {
		t.Errorf("after Reset: Len, Size = %d, %d; want 0, 0", l.Len(), l.Size())
	}
}
