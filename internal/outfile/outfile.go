// Package outfile creates the files amdahl writes into an output directory
// (--out: trace.jsonl, summary.json, pprof files, ab.json) without following
// a symbolic link at the file's own name: a link planted there by another
// local user would otherwise make amdahl truncate whatever it points to. A
// symbolic link in the directory path is the user's own choice and is
// followed.
package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Create creates or truncates path for writing (mode 0644). It refuses a
// path whose last element is a symbolic link, with an error that says so.
func Create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		// O_NOFOLLOW on a link fails with ELOOP; say what it means.
		if errors.Is(err, syscall.ELOOP) {
			if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return nil, fmt.Errorf("create %s: it is a symbolic link; amdahl does not write through links in an output directory (remove it, or choose another directory)", path)
			}
		}
		return nil, err
	}
	return f, nil
}

// WriteFile writes data to path as Create does, and closes it.
func WriteFile(path string, data []byte) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}
