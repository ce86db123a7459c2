package kiln

// The operating systems and architectures an agent may report (Go's GOOS
// and GOARCH values). Only these become labels: a value outside them could
// be any label at all, and would slip a label past a token's scope (B114).
var (
	knownOS = map[string]bool{
		"aix": true, "android": true, "darwin": true, "dragonfly": true, "freebsd": true, "illumos": true,
		"ios": true, "js": true, "linux": true, "netbsd": true, "openbsd": true, "plan9": true,
		"solaris": true, "wasip1": true, "windows": true,
	}
	knownArch = map[string]bool{
		"386": true, "amd64": true, "arm": true, "arm64": true, "loong64": true, "mips": true,
		"mips64": true, "mips64le": true, "mipsle": true, "ppc64": true, "ppc64le": true,
		"riscv64": true, "s390x": true, "wasm": true,
	}
)

// IsOS reports whether label is an operating system an agent may report.
func IsOS(label string) bool { return knownOS[label] }

// IsArch reports whether label is an architecture an agent may report.
func IsArch(label string) bool { return knownArch[label] }
