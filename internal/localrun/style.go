package localrun

import "github.com/kilnci/kiln"

// style colours kiln run's own lines on a terminal (Options.Colour), with
// SGR sequences only; log lines keep their own colours, or none.
type style struct{ on bool }

const (
	sgrBold   = "1"
	sgrRed    = "31"
	sgrGreen  = "32"
	sgrYellow = "33"
	sgrDim    = "2"
)

func (s style) paint(code, text string) string {
	if !s.on {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

// status colours a job or step status: green when it passed, red when it
// failed, dim when it was skipped or cancelled.
func (s style) status(st string) string {
	switch kiln.JobStatus(st).Result() {
	case kiln.ResultSuccess:
		return s.paint(sgrGreen, st)
	case kiln.ResultSkipped, kiln.ResultCancelled:
		return s.paint(sgrYellow, st)
	case "":
		return st
	}
	return s.paint(sgrRed, st)
}
