package scenario

// prescan counts, in one pass over data that allocates nothing, a lower
// bound of the YAML nodes the parser would build, up to limit+1, and
// returns the count and the line and column (1-based) of the node that
// takes it past limit, or 0, 0 if it stays within it. The YAML parser builds every node of a file before
// the decoder's walk can count them (about 160 bytes each: a 1 MiB file of
// "[1,1,1,…]" is half a million nodes, 128 MB), so the node budget is
// enforced here first, on the bytes.
//
// The count never exceeds the nodes the parser builds (FuzzPrescan checks
// it against yaml.v3's tree), so no file within the budget is refused; and
// what it leaves out is bounded (the collection a block mapping or a
// block sequence opens, the null of a missing value: a constant factor),
// so a file it lets through builds a bounded tree. It counts:
//   - in flow context ([…], {…}), each scalar, alias or collection that
//     starts an entry (after "[", "{", ",", "?" or ":"); a plain scalar
//     that goes on over a line break is counted once;
//   - in block context, each "- " entry and "? " key (the node it holds),
//     each key (a scalar followed by ": ") and each value that starts on
//     the key's line; a line of plain text (the continuation of a
//     multi-line scalar) counts nothing, and the lines of a block scalar
//     (| or >) are skipped.
//
// Quoted scalars (with their escapes), comments, anchors, tags and
// directives count nothing; neither do "---" and "...".
func prescan(data []byte, limit int) (count, line, col int) {
	s := scanner{data: data, line: 1, lineStart: 0}
	node := func(at int) bool {
		count++
		if count > limit {
			line, col = s.line, at-s.lineStart+1
			return true
		}
		return false
	}
	depth := 0        // flow nesting
	expect := false   // a node may start here (counted when it does)
	atLine := true    // only indentation since the line began (block context)
	lineIndent := 0   // the indentation of the current line
	afterKey := false // block context: a key's ":" was seen on this line
	// Block context: the column of the collection a value on this line
	// belongs to (a key's, a "- "'s; -1: none seen), and of one on the next
	// line (after a key or "-" that ended its line). A plain or block
	// scalar's lines are those indented more than it.
	valueCol, pendingCol := -1, -1
	content := false // the line had something but a comment
	lastIndicator := false
	for s.i < len(data) {
		c := data[s.i]
		switch {
		case c == '\n':
			s.newline()
			if content {
				pendingCol = -1
				if lastIndicator {
					pendingCol = valueCol
				}
			}
			atLine, afterKey, lineIndent, content, lastIndicator = true, false, 0, false, false
			valueCol = pendingCol
			if depth == 0 {
				expect = false
			}
			continue
		case c == ' ' || c == '\t' || c == '\r':
			if atLine && c == ' ' {
				lineIndent++
			}
			s.i++
			continue
		case c == '#' && (s.i == 0 || isSpace(data[s.i-1])):
			s.skipLine()
			continue
		}
		startOfLine := atLine
		atLine = false
		content = true
		lastIndicator = false
		if depth == 0 && startOfLine && lineIndent == 0 && (c == '%' || s.hasPrefix("---") || s.hasPrefix("...")) {
			if c == '%' {
				s.skipLine()
			} else {
				s.i += 3
			}
			continue
		}
		at := s.i
		switch c {
		case '[', '{':
			if expect && node(at) {
				return
			}
			depth++
			expect = true
			s.i++
			continue
		case ']', '}':
			if depth > 0 {
				depth--
			}
			expect = false
			s.i++
			continue
		case ',':
			if depth > 0 {
				expect = true
			}
			s.i++
			continue
		case '-', '?', ':':
			if s.indicator(depth > 0) && (depth == 0 || c != '-') {
				s.i++
				switch {
				case c == ':':
					expect = true
					if depth == 0 {
						afterKey = true
					}
				case depth > 0: // "?" in flow: an explicit key, counted here
					if expect && node(at) {
						return
					}
					expect = false
				default: // "- " or "? " in block context: the node of the entry
					if node(at) {
						return
					}
					expect = false
					afterKey = false
				}
				if depth == 0 {
					lastIndicator = true
					if c != ':' {
						valueCol = at - s.lineStart
					}
				}
				continue
			}
		case '&', '!':
			s.skipToken()
			continue
		case '*':
			if expect && node(at) {
				return
			}
			expect = false
			s.skipToken()
			continue
		case '|', '>':
			if depth == 0 {
				if expect && node(at) {
					return
				}
				expect = false
				s.skipBlockScalar(valueCol)
				atLine, afterKey, lineIndent, content, pendingCol = true, false, 0, false, -1
				valueCol = -1
				continue
			}
		}
		// A scalar, quoted or plain.
		counted := expect
		if expect {
			if node(at) {
				return
			}
			expect = false
		}
		plain := c != '"' && c != '\''
		if plain {
			s.skipPlain(depth > 0)
		} else {
			s.skipQuoted(c)
		}
		// A key: the scalar is followed by ":" (in flow, right after a
		// quoted one too). In block context a key counts even at the
		// start of a line, where expect is false.
		j := s.i
		for j < len(data) && (data[j] == ' ' || data[j] == '\t') {
			j++
		}
		if j < len(data) && data[j] == ':' && (j+1 == len(data) || isSpace(data[j+1]) || depth > 0) {
			if !counted && depth == 0 && !afterKey {
				if node(at) {
					return
				}
			}
			s.i = j + 1
			expect = true
			if depth == 0 {
				afterKey, lastIndicator = true, true
				valueCol = at - s.lineStart
			}
			continue
		}
		if plain && depth == 0 && (s.i == len(data) || data[s.i] == '\n') {
			// A plain scalar goes on over the lines indented more than
			// the collection it is in: they are its text, not structure.
			s.skipBlockScalar(valueCol)
			atLine, afterKey, lineIndent, content, pendingCol = true, false, 0, false, -1
			valueCol = -1
		}
	}
	return count, 0, 0
}

type scanner struct {
	data      []byte
	i         int
	line      int
	lineStart int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) newline() {
	s.i++
	s.line++
	s.lineStart = s.i
}

func (s *scanner) hasPrefix(p string) bool {
	if len(s.data)-s.i < len(p) || string(s.data[s.i:s.i+len(p)]) != p {
		return false
	}
	return s.i+len(p) == len(s.data) || isSpace(s.data[s.i+len(p)])
}

// indicator reports whether the "-", "?" or ":" at s.i is an indicator:
// followed by a space, a line break, the end, or (in flow) a flow
// indicator.
func (s *scanner) indicator(flow bool) bool {
	if s.i+1 >= len(s.data) {
		return true
	}
	c := s.data[s.i+1]
	return isSpace(c) || flow && flowIndicator(c)
}

// skipLine moves to the line break that ends the line (not past it).
func (s *scanner) skipLine() {
	for s.i < len(s.data) && s.data[s.i] != '\n' {
		s.i++
	}
}

// skipToken skips an anchor, alias or tag: up to a space or a flow
// indicator.
func (s *scanner) skipToken() {
	s.i++
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r', ',', '[', ']', '{', '}':
			return
		}
		s.i++
	}
}

// skipQuoted skips a quoted scalar, line breaks included.
func (s *scanner) skipQuoted(q byte) {
	s.i++
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\n':
			s.newline()
			continue
		case q == '"' && c == '\\':
			s.i++
			if s.i < len(s.data) && s.data[s.i] == '\n' {
				s.newline()
				continue
			}
		case c == q:
			if q == '\'' && s.i+1 < len(s.data) && s.data[s.i+1] == '\'' {
				s.i += 2
				continue
			}
			s.i++
			return
		}
		s.i++
	}
}

// skipPlain skips a plain scalar's text on this line: up to ": ", " #",
// the line break and, in flow, a flow indicator.
func (s *scanner) skipPlain(flow bool) {
	s.i++
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\n':
			return
		case c == ':' && (s.i+1 == len(s.data) || isSpace(s.data[s.i+1]) || flow && flowIndicator(s.data[s.i+1])):
			return
		case c == '#' && isSpace(s.data[s.i-1]):
			return
		case flow && flowIndicator(c):
			return
		}
		s.i++
	}
}

func flowIndicator(c byte) bool { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}' }

// skipBlockScalar skips the header of a block scalar (| or >) and its
// lines: every following line that is blank or indented more than indent.
// It stops at the start of the first line that is not.
func (s *scanner) skipBlockScalar(indent int) {
	s.skipLine()
	for s.i < len(s.data) {
		s.newline()
		j := s.i
		for j < len(s.data) && s.data[j] == ' ' {
			j++
		}
		if j < len(s.data) && s.data[j] != '\n' && s.data[j] != '\r' && j-s.i <= indent {
			return
		}
		s.i = j
		s.skipLine()
	}
}
