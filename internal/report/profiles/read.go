package profiles

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/pprof/profile"
)

// Bounds on what is read from the directory. Each is checked before the
// memory it bounds is allocated: a file is scanned as a stream (counting
// its records) before it is decompressed into memory and parsed.
const (
	// MaxFileBytes bounds one profile file, compressed and decompressed.
	MaxFileBytes = 64 << 20
	// MaxHosts bounds the hosts/ subdirectories read.
	MaxHosts = 4096
	// MaxSamples bounds the samples of one profile.
	MaxSamples = 1 << 18
	// MaxLocations bounds the locations (and the functions, mappings and
	// strings, each) of one profile.
	MaxLocations = 1 << 18
	// MaxFrames bounds one profile's stack frames, values and labels
	// over all its samples, and its lines over all its locations.
	MaxFrames = 1 << 22
)

// The bounds in force; tests lower them.
var (
	fileLimit, hostLimit = MaxFileBytes, MaxHosts
	sampleLimit          = MaxSamples
	locationLimit        = MaxLocations
	frameLimit           = MaxFrames
)

// readFile parses one pprof protobuf file, gzipped once or not, within
// the bounds above. A gzip stream inside the gzip stream (nested
// compression) is refused: pprof files are compressed once.
func readFile(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	defer f.Close()
	fail := func(err error) error { return fmt.Errorf("profiles: %s: %w", path, err) }
	open := func() (io.Reader, bool, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, false, err
		}
		br := bufio.NewReader(io.LimitReader(f, int64(fileLimit)+1))
		head, _ := br.Peek(2)
		if !isGzip(head) {
			return br, false, nil
		}
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, true, err
		}
		zr.Multistream(false)
		return zr, true, nil
	}
	if fi, err := f.Stat(); err != nil {
		return nil, fail(err)
	} else if fi.Size() > int64(fileLimit) {
		return nil, fail(tooBig())
	}

	// First pass: scan the stream, keeping nothing.
	r, zipped, err := open()
	if err != nil {
		return nil, fail(err)
	}
	br := bufio.NewReader(r)
	if head, _ := br.Peek(2); zipped && isGzip(head) {
		return nil, fail(errors.New("gzip inside gzip: nested compression is refused (a pprof file is compressed once)"))
	}
	sc := scanner{r: br}
	if err := sc.profile(); err != nil {
		return nil, fail(err)
	}

	// Second pass: decompress into a buffer of the size scanned, and parse.
	r, _, err = open()
	if err != nil {
		return nil, fail(err)
	}
	data := make([]byte, sc.n)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fail(err)
	}
	p, err := profile.ParseUncompressed(data)
	if err != nil {
		return nil, fail(err)
	}
	return p, nil
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

func tooBig() error {
	return fmt.Errorf("larger than %d bytes (the MaxFileBytes bound on a profile file, compressed or not)", fileLimit)
}

// scanner reads a pprof Profile message as a stream and counts what
// parsing it would allocate, against the bounds.
type scanner struct {
	r                     *bufio.Reader
	n                     int64 // bytes read
	samples, locs, frames int
	funcs, maps, strs     int
}

// Field numbers of perftools.profiles.Profile, Sample and Location.
const (
	fProfileSample   = 2
	fProfileMapping  = 3
	fProfileLocation = 4
	fProfileFunction = 5
	fProfileString   = 6
	fLocationLine    = 4
)

func (s *scanner) byteRead() (byte, error) {
	b, err := s.r.ReadByte()
	if err == nil {
		s.n++
		if s.n > int64(fileLimit) {
			return 0, tooBig()
		}
	}
	return b, err
}

func (s *scanner) varint() (uint64, error) {
	var x uint64
	for shift := 0; shift < 64; shift += 7 {
		b, err := s.byteRead()
		if err != nil {
			return 0, err
		}
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("malformed varint")
}

func (s *scanner) skip(n uint64) error {
	if n > uint64(fileLimit) || s.n+int64(n) > int64(fileLimit) {
		return tooBig()
	}
	m, err := io.CopyN(io.Discard, s.r, int64(n))
	s.n += m
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// count adds n to *c and checks it against limit.
func count(c *int, n, limit int, what, bound string) error {
	*c += n
	if *c > limit {
		return fmt.Errorf("more than %d %s (the %s bound on one profile)", limit, what, bound)
	}
	return nil
}

// field reads one field's key: its number and wire type; io.EOF at a
// clean end.
func (s *scanner) field() (num uint64, wt byte, err error) {
	k, err := s.varint()
	if err != nil {
		return 0, 0, err
	}
	return k >> 3, byte(k & 7), nil
}

// value skips a field's value of wire type wt, and returns the length of
// a length-delimited one without skipping it.
func (s *scanner) value(wt byte) (length uint64, delimited bool, err error) {
	switch wt {
	case 0:
		_, err = s.varint()
	case 1:
		err = s.skip(8)
	case 5:
		err = s.skip(4)
	case 2:
		length, err = s.varint()
		return length, true, err
	default:
		err = fmt.Errorf("malformed profile: wire type %d", wt)
	}
	return 0, false, err
}

func (s *scanner) profile() error {
	for {
		num, wt, err := s.field()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n, delimited, err := s.value(wt)
		if err != nil || !delimited {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			continue
		}
		switch num {
		case fProfileSample:
			if err := count(&s.samples, 1, sampleLimit, "samples", "MaxSamples"); err != nil {
				return err
			}
			err = s.sub(n, func(num uint64, n uint64, packed bool) error {
				// location_id and value (packed varints), label: each
				// element a frame's worth.
				k := 1
				if packed && (num == 1 || num == 2) {
					var err error
					if k, err = s.packed(n); err != nil {
						return err
					}
				} else if err := s.skip(n); err != nil {
					return err
				}
				return count(&s.frames, k, frameLimit, "stack frames, values and labels", "MaxFrames")
			})
		case fProfileLocation:
			if err := count(&s.locs, 1, locationLimit, "locations", "MaxLocations"); err != nil {
				return err
			}
			err = s.sub(n, func(num uint64, n uint64, packed bool) error {
				if packed {
					if err := s.skip(n); err != nil {
						return err
					}
				}
				if num == fLocationLine {
					return count(&s.frames, 1, frameLimit, "location lines", "MaxFrames")
				}
				return nil
			})
		default:
			switch num {
			case fProfileMapping:
				err = count(&s.maps, 1, locationLimit, "mappings", "MaxLocations")
			case fProfileFunction:
				err = count(&s.funcs, 1, locationLimit, "functions", "MaxLocations")
			case fProfileString:
				err = count(&s.strs, 1, locationLimit, "strings", "MaxLocations")
			}
			if err == nil {
				err = s.skip(n)
			}
		}
		if err != nil {
			return err
		}
	}
}

// sub scans a sub-message of n bytes, calling f for each field (a
// length-delimited one with its length, not yet read: f reads or skips
// it; another with packed false and its value already read).
func (s *scanner) sub(n uint64, f func(num, n uint64, packed bool) error) error {
	end := s.n + int64(n)
	if n > uint64(fileLimit) || end > int64(fileLimit) {
		return tooBig()
	}
	for s.n < end {
		num, wt, err := s.field()
		if err != nil {
			return noEOF(err)
		}
		m, delimited, err := s.value(wt)
		if err != nil {
			return noEOF(err)
		}
		if delimited && s.n+int64(m) > end {
			return errors.New("malformed profile: a field overruns its message")
		}
		if err := f(num, m, delimited); err != nil {
			return noEOF(err)
		}
	}
	if s.n != end {
		return errors.New("malformed profile: a field overruns its message")
	}
	return nil
}

// packed reads n bytes of packed varints and returns how many there are.
func (s *scanner) packed(n uint64) (int, error) {
	var buf [4096]byte
	k := 0
	for n > 0 {
		m := uint64(len(buf))
		if n < m {
			m = n
		}
		if _, err := io.ReadFull(s.r, buf[:m]); err != nil {
			return k, noEOF(err)
		}
		s.n += int64(m)
		if s.n > int64(fileLimit) {
			return k, tooBig()
		}
		for _, b := range buf[:m] {
			if b < 0x80 {
				k++
			}
		}
		n -= m
	}
	return k, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
