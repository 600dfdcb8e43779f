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
	p := prescanner{scanner: scanner{data: data, line: 1}, limit: limit, atLine: true, valueCol: -1, pendingCol: -1}
	if p.run() {
		return p.count, p.overLine, p.overCol
	}
	return p.count, 0, 0
}

// prescanner is prescan's state: the position, and what the bytes before
// it say about where the next node can start.
type prescanner struct {
	scanner
	limit, count      int
	overLine, overCol int  // where the count went past limit
	depth             int  // flow nesting
	expect            bool // a node may start here (counted when it does)
	atLine            bool // only indentation since the line began (block context)
	lineIndent        int  // the indentation of the current line
	afterKey          bool // block context: a key's ":" was seen on this line
	// Block context: the column of the collection a value on this line
	// belongs to (a key's, a "- "'s; -1: none seen), and of one on the next
	// line (after a key or "-" that ended its line). A plain or block
	// scalar's lines are those indented more than it.
	valueCol, pendingCol int
	content              bool // the line had something but a comment
	lastIndicator        bool // the line's last token was "-", "?", ":" or a key's ":"
}

// run scans to the end of the data, or to the node that takes the count
// past limit, and then reports true.
func (p *prescanner) run() bool {
	for p.i < len(p.data) {
		c := p.data[p.i]
		if p.blank(c) {
			continue
		}
		startOfLine := p.atLine
		p.atLine, p.content, p.lastIndicator = false, true, false
		if p.depth == 0 && startOfLine && p.lineIndent == 0 && (c == '%' || p.hasPrefix("---") || p.hasPrefix("...")) {
			if c == '%' {
				p.skipLine()
			} else {
				p.i += 3
			}
			continue
		}
		at := p.i
		handled, over := false, false
		switch c {
		case '[', '{', ']', '}', ',':
			handled, over = true, p.flow(c, at)
		case '-', '?', ':':
			handled, over = p.indicatorNode(c, at)
		case '&', '!':
			handled = true
			p.skipToken()
		case '*':
			handled = true
			if p.expect && p.node(at) {
				return true
			}
			p.expect = false
			p.skipToken()
		case '|', '>':
			handled, over = p.blockScalar(at)
		}
		if over {
			return true
		}
		if !handled && p.scalar(c, at) {
			return true
		}
	}
	return false
}

// node counts a node that starts at byte at, and reports whether it takes
// the count past limit (then it records where).
func (p *prescanner) node(at int) bool {
	p.count++
	if p.count > p.limit {
		p.overLine, p.overCol = p.line, at-p.lineStart+1
		return true
	}
	return false
}

// blank moves past a line break, a space, a tab, a carriage return or a
// comment at p.i, and reports whether there was one.
func (p *prescanner) blank(c byte) bool {
	switch {
	case c == '\n':
		p.newline()
		if p.content {
			p.pendingCol = -1
			if p.lastIndicator {
				p.pendingCol = p.valueCol
			}
		}
		p.atLine, p.afterKey, p.lineIndent, p.content, p.lastIndicator = true, false, 0, false, false
		p.valueCol = p.pendingCol
		if p.depth == 0 {
			p.expect = false
		}
	case c == ' ' || c == '\t' || c == '\r':
		if p.atLine && c == ' ' {
			p.lineIndent++
		}
		p.i++
	case c == '#' && (p.i == 0 || isSpace(p.data[p.i-1])):
		p.skipLine()
	default:
		return false
	}
	return true
}

// flow takes a flow collection's bracket or comma at p.i; over: the
// collection it opens takes the count past limit.
func (p *prescanner) flow(c byte, at int) (over bool) {
	switch c {
	case '[', '{':
		if p.expect && p.node(at) {
			return true
		}
		p.depth++
		p.expect = true
	case ']', '}':
		if p.depth > 0 {
			p.depth--
		}
		p.expect = false
	case ',':
		if p.depth > 0 {
			p.expect = true
		}
	}
	p.i++
	return false
}

// indicatorNode takes the "-", "?" or ":" at p.i when it is an indicator
// ("-" in block context only): a value follows a ":"; "- " and "? " hold
// a node, counted here. handled is false when it is a scalar's first
// character.
func (p *prescanner) indicatorNode(c byte, at int) (handled, over bool) {
	if !p.indicator(p.depth > 0) || p.depth > 0 && c == '-' {
		return false, false
	}
	p.i++
	switch {
	case c == ':':
		p.expect = true
		if p.depth == 0 {
			p.afterKey = true
		}
	case p.depth > 0: // "?" in flow: an explicit key, counted here
		if p.expect && p.node(at) {
			return true, true
		}
		p.expect = false
	default: // "- " or "? " in block context: the node of the entry
		if p.node(at) {
			return true, true
		}
		p.expect = false
		p.afterKey = false
	}
	if p.depth == 0 {
		p.lastIndicator = true
		if c != ':' {
			p.valueCol = at - p.lineStart
		}
	}
	return true, false
}

// blockScalar takes a block scalar (| or >) at p.i, in block context; in
// flow context handled is false (the character starts a plain scalar).
func (p *prescanner) blockScalar(at int) (handled, over bool) {
	if p.depth > 0 {
		return false, false
	}
	if p.expect && p.node(at) {
		return true, true
	}
	p.expect = false
	p.skipBlockScalar(p.valueCol)
	p.textSkipped()
	return true, false
}

// textSkipped: the lines of a block scalar, or of a plain scalar that went
// on over a line break, were skipped; the scan is at the start of a line
// that holds no value of a collection yet.
func (p *prescanner) textSkipped() {
	p.atLine, p.afterKey, p.lineIndent, p.content, p.pendingCol = true, false, 0, false, -1
	p.valueCol = -1
}

// scalar takes a scalar, quoted or plain, at p.i, and the ":" after it
// when it is a key.
func (p *prescanner) scalar(c byte, at int) (over bool) {
	counted := p.expect
	if p.expect {
		if p.node(at) {
			return true
		}
		p.expect = false
	}
	plain := c != '"' && c != '\''
	if plain {
		p.skipPlain(p.depth > 0)
	} else {
		p.skipQuoted(c)
	}
	// A key: the scalar is followed by ":" (in flow, right after a quoted
	// one too). In block context a key counts even at the start of a line,
	// where expect is false.
	data := p.data
	j := p.i
	for j < len(data) && (data[j] == ' ' || data[j] == '\t') {
		j++
	}
	if j < len(data) && data[j] == ':' && (j+1 == len(data) || isSpace(data[j+1]) || p.depth > 0) {
		if !counted && p.depth == 0 && !p.afterKey && p.node(at) {
			return true
		}
		p.i = j + 1
		p.expect = true
		if p.depth == 0 {
			p.afterKey, p.lastIndicator = true, true
			p.valueCol = at - p.lineStart
		}
		return false
	}
	if plain && p.depth == 0 && (p.i == len(data) || data[p.i] == '\n') {
		// A plain scalar goes on over the lines indented more than the
		// collection it is in: they are its text, not structure.
		p.skipBlockScalar(p.valueCol)
		p.textSkipped()
	}
	return false
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
	for s.i < len(s.data) && !isSpace(s.data[s.i]) && !flowIndicator(s.data[s.i]) {
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
