// Package yamldoc parses a YAML document for a decoder that walks its
// nodes by hand so that every error names a line and column, as amdahl's
// scenario files and attribution rules files are decoded: exactly one
// document, and a syntax error placed at the line and column where it
// first appears (yaml.v3 gives some with the line of the enclosing
// construct, some with no line, none with a column).
package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Error is a problem at a line and column of a document (0: not known).
type Error struct {
	Line, Column int
	Msg          string
	err          error // ErrMoreDocuments, or nil
}

// ErrMoreDocuments is what Parse's error for a second document wraps.
var ErrMoreDocuments = errors.New("more than one YAML document")

func (e *Error) Unwrap() error { return e.err }

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg) }

// Parse parses data as one YAML document and returns its root node, nil
// when the document is empty (nothing, or only comments). A second
// document is an *Error at its start (ErrMoreDocuments), a
// syntax error an *Error "invalid YAML: <the parser's message>" at its
// line and column. Anchors and aliases are left to the caller, as the
// parser's nodes have them. The error is an *Error, not an error, for
// the caller to put its line, column and message into its own.
func Parse(data []byte) (*yaml.Node, *Error) {
	docs, err := parseDocuments(data, 2)
	switch {
	case err != nil:
		return nil, syntaxError(data, err)
	case len(docs) > 1:
		return nil, &Error{Line: docs[1].Line, Column: docs[1].Column, Msg: ErrMoreDocuments.Error(), err: ErrMoreDocuments}
	case len(docs) == 0 || docs[0].Kind != yaml.DocumentNode || len(docs[0].Content) != 1:
		return nil, nil
	}
	return docs[0].Content[0], nil
}

// parseDocuments parses up to max documents of data.
func parseDocuments(data []byte, max int) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for len(docs) < max {
		doc := new(yaml.Node)
		if err := dec.Decode(doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return docs, err
		}
		docs = append(docs, doc)
	}
	return docs, nil
}

var yamlLine = regexp.MustCompile(`(?s)^yaml: (?:line ([0-9]+): )?(.*)$`)

// syntaxError turns a YAML parser error into an *Error with the line and
// column of the problem.
func syntaxError(data []byte, err error) *Error {
	e := &Error{Msg: "invalid YAML: " + err.Error()}
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return e
	}
	e.Msg = "invalid YAML: " + m[2]
	e.Line, _ = strconv.Atoi(m[1])
	if line, col := syntaxPosition(data, m[2]); line > 0 {
		e.Line, e.Column = line, col
	}
	return e
}

// unknownAnchor is yaml.v3's message for an alias of no anchor.
var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// syntaxPosition returns the 1-based line and column at which a syntax
// error with message msg first appears, or 0, 0 if it cannot tell. yaml.v3
// reports some errors at the line where the enclosing construct began,
// 0-based, others (an unknown alias) with no line at all, and none with a
// column; the first line whose prefix of the document fails with the same
// message is where the problem is, and within it the shortest prefix that
// fails so ends at the column (for an unknown alias: the "*name" on that
// line). The search is quadratic, so it gives up once it has re-parsed
// maxParsed bytes: every line and column of a file of a few KB, a
// fraction of a second for the slowest YAML (10,000 levels of nesting)
// rather than seconds.
func syntaxPosition(data []byte, msg string) (line, col int) {
	const maxParsed = 256 << 10
	parsed := 0
	fails := func(end int) (bool, bool) {
		if parsed += end; parsed > maxParsed {
			return false, false
		}
		_, err := parseDocuments(data[:end], math.MaxInt)
		if err == nil {
			return false, true
		}
		m := yamlLine.FindStringSubmatch(err.Error())
		return m != nil && m[2] == msg, true
	}
	start := 0 // of the line
	for i := 0; i <= len(data); i++ {
		if i < len(data) && data[i] != '\n' {
			continue
		}
		line++
		failed, ok := fails(i)
		if !ok {
			return 0, 0
		}
		if failed {
			if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
				if c := bytes.Index(data[start:i], []byte("*"+m[1])); c >= 0 {
					return line, c + 1
				}
			}
			for j := start + 1; j <= i; j++ {
				failed, ok := fails(j)
				if !ok {
					return line, 0
				}
				if failed {
					return line, j - start
				}
			}
			return line, 0
		}
		start = i + 1
	}
	return 0, 0
}
