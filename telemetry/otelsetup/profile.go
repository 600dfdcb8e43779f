package otelsetup

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"time"

	"github.com/grafana/pyroscope-go"

	"github.com/amdahl-rt/amdahl/internal/outfile"
	"github.com/amdahl-rt/amdahl/internal/proccpu"
)

// PyroscopeConfig configures continuous profiling to a Pyroscope server.
type PyroscopeConfig struct {
	// ServerAddress is the server URL (PYROSCOPE_SERVER_ADDRESS); empty
	// disables pyroscope.
	ServerAddress string
	// ApplicationName defaults to the service name.
	ApplicationName string
	// Tags are static labels on every profile.
	Tags map[string]string
	// UploadRate defaults to pyroscope's 15 s.
	UploadRate time.Duration
	// ProfileTypes defaults to CPU, alloc and inuse (objects and space).
	ProfileTypes []pyroscope.ProfileType
	// MutexProfileFraction and BlockProfileRate, when > 0, add the mutex and
	// block profile types and set the runtime rates (restored at Shutdown).
	MutexProfileFraction int
	BlockProfileRate     int
	// Logger receives pyroscope's messages; nil discards them.
	Logger pyroscope.Logger
}

type profiles struct {
	pyro *pyroscope.Profiler

	cpuFile *os.File
	cpuW    *firstErrWriter // cpuFile, keeping the first write error
	dir     string
	// cpuStart is the process's CPU time when its CPU profile started
	// (written to proccpu.WindowFile at stop).
	cpuStart time.Duration
	// sysmonStart is the Go runtime's sysmon thread's CPU time then
	// (proccpu.SysmonUsed), sysmonErr why it could not be read.
	sysmonStart time.Duration
	sysmonErr   error

	prevMutex int
	setMutex  bool
	setBlock  bool
}

func startProfiles(dir string, pc PyroscopeConfig, service string) (*profiles, error) {
	if dir == "" && pc.ServerAddress == "" {
		return nil, nil
	}
	p := &profiles{dir: dir}
	if pc.ServerAddress != "" {
		cfg := pyroscope.Config{
			ApplicationName: cmp.Or(pc.ApplicationName, service),
			ServerAddress:   pc.ServerAddress,
			Tags:            pc.Tags,
			UploadRate:      pc.UploadRate,
			Logger:          pc.Logger,
			ProfileTypes:    pc.ProfileTypes,
		}
		if len(cfg.ProfileTypes) == 0 {
			cfg.ProfileTypes = append([]pyroscope.ProfileType(nil), pyroscope.DefaultProfileTypes...)
		}
		if pc.MutexProfileFraction > 0 {
			p.prevMutex = goruntime.SetMutexProfileFraction(pc.MutexProfileFraction)
			p.setMutex = true
			cfg.ProfileTypes = append(cfg.ProfileTypes, pyroscope.ProfileMutexCount, pyroscope.ProfileMutexDuration)
		}
		if pc.BlockProfileRate > 0 {
			goruntime.SetBlockProfileRate(pc.BlockProfileRate)
			p.setBlock = true
			cfg.ProfileTypes = append(cfg.ProfileTypes, pyroscope.ProfileBlockCount, pyroscope.ProfileBlockDuration)
		}
		prof, err := pyroscope.Start(cfg)
		if err != nil {
			p.restoreRates()
			return nil, &ConfigError{Setting: EnvPyroscopeAddress, Value: pc.ServerAddress, Reason: err.Error()}
		}
		p.pyro = prof
	}
	if dir != "" {
		f, err := createProfile(filepath.Join(dir, "cpu.pprof"))
		if err != nil {
			_ = p.stop()
			return nil, &ConfigError{Setting: EnvProfileDir, Value: dir, Reason: err.Error()}
		}
		w := &firstErrWriter{w: f}
		// The window's readings are taken right before sampling starts
		// and right before it stops, in this goroutine (see stop).
		p.sysmonStart, p.sysmonErr = proccpu.SysmonUsed()
		p.cpuStart = proccpu.Used()
		if err := pprof.StartCPUProfile(w); err != nil {
			f.Close()
			_ = p.stop()
			return nil, fmt.Errorf("telemetry: start cpu profile: %w", err)
		}
		p.cpuFile, p.cpuW = f, w
	}
	return p, nil
}

// createProfile creates a profile file in an output directory (a variable
// so that a test can hand out a file whose writes fail).
var createProfile = outfile.Create

// firstErrWriter keeps the first write error. runtime/pprof drops the errors
// of the CPU profile's writes, so a full disk would otherwise leave a
// truncated cpu.pprof without a word. Only the profile's writer goroutine
// writes; StopCPUProfile waits for it before err is read.
type firstErrWriter struct {
	w   io.Writer
	err error
}

func (e *firstErrWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	if err != nil {
		e.err = err
	}
	return n, err
}

func (p *profiles) restoreRates() {
	if p.setMutex {
		goruntime.SetMutexProfileFraction(p.prevMutex)
		p.setMutex = false
	}
	if p.setBlock {
		goruntime.SetBlockProfileRate(0)
		p.setBlock = false
	}
}

// stopCPUProfile stops sampling and writes the CPU profile out (a
// variable so that a test can see where the window's readings fall).
var stopCPUProfile = pprof.StopCPUProfile

// stop ends the profiles. The heap profile is written, and its forced GC
// done, while the CPU profile still runs, so that their CPU is in it; the
// CPU profile stops last, and its window (proccpu.WindowFile) is written.
// The window ends right before sampling stops: StopCPUProfile then reads
// the last samples, symbolizes, compresses and writes the file with no
// sample taken, so that work's CPU is read apart (Window.Written).
func (p *profiles) stop() error {
	var errs []error
	if p.cpuFile != nil {
		errs = append(errs, writeHeap(filepath.Join(p.dir, "heap.pprof")))
		win := proccpu.Window{Start: p.cpuStart}
		if p.sysmonErr == nil {
			// sysmon's CPU is read inside the process's, so that it is a
			// part of the window's.
			if s, err := proccpu.SysmonUsed(); err == nil && s >= p.sysmonStart {
				d := s - p.sysmonStart
				win.Sysmon = &d
			}
		}
		win.Stop = proccpu.Used()
		stopCPUProfile()
		win.Written = max(proccpu.Used(), win.Stop)
		if p.cpuW.err != nil {
			errs = append(errs, fmt.Errorf("write cpu profile %s: %w", p.cpuFile.Name(), p.cpuW.err))
		}
		errs = append(errs, p.cpuFile.Close())
		p.cpuFile, p.cpuW = nil, nil
		errs = append(errs, writeWindow(filepath.Join(p.dir, proccpu.WindowFile), win))
	}
	if p.pyro != nil {
		// Stop alone uploads only the last CPU chunk; Flush first so heap
		// (and mutex/block) data since the last tick is not lost.
		p.pyro.Flush(true)
		errs = append(errs, p.pyro.Stop())
		p.pyro = nil
	}
	p.restoreRates()
	return errors.Join(errs...)
}

func writeWindow(path string, w proccpu.Window) error {
	b, err := json.Marshal(w)
	if err == nil {
		err = outfile.WriteFile(path, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("write cpu profile window: %w", err)
	}
	return nil
}

func writeHeap(path string) error {
	f, err := createProfile(path)
	if err != nil {
		return fmt.Errorf("write heap profile: %w", err)
	}
	goruntime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write heap profile: %w", err)
	}
	return f.Close()
}
