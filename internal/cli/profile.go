package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts a CPU profile into cpuPath (when set) and returns
// a function that stops it and writes a heap profile into memPath (when
// set). `kiln bench --cpuprofile` starts its servers with these to show
// where the server's time goes; `go tool pprof -top` reads the files, the
// heap profile's alloc_space sample counting every allocation since start.
func startProfiles(cpuPath, memPath string) (stop func() error, err error) {
	var cpu *os.File
	if cpuPath != "" {
		if cpu, err = os.Create(cpuPath); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if memPath != "" {
			f, err := os.Create(memPath)
			if err != nil {
				return errors.Join(append(errs, fmt.Errorf("heap profile: %w", err))...)
			}
			runtime.GC() // the heap profile is as of the last collection
			errs = append(errs, pprof.Lookup("heap").WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}
