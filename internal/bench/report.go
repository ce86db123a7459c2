package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

// Print writes the report as a table for people.
func Print(w io.Writer, r *Report) {
	fmt.Fprintf(w, "kiln bench on %s, %d CPUs, %s, %s\n\n", r.Database, r.CPUs, r.GoVersion, r.Started.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMEASURE\tVALUE\tUNIT\tTARGET\t")
	for _, res := range r.Results {
		target := "-"
		if res.Target != nil {
			target = res.Target.String() + " " + judge(res)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", res.Scenario, res.Name, formatValue(res.Value), res.Unit, target)
	}
	tw.Flush()
	met, missed := r.Tally()
	fmt.Fprintf(w, "\n%d targets met, %d missed\n", met, missed)
}

// Tally counts the results that met and missed their targets.
func (r *Report) Tally() (met, missed int) {
	for _, res := range r.Results {
		if res.Met == nil {
			continue
		}
		if *res.Met {
			met++
		} else {
			missed++
		}
	}
	return met, missed
}

func judge(r Result) string {
	switch {
	case r.Met == nil:
		return ""
	case *r.Met:
		return "met"
	default:
		return "MISSED"
	}
}

// formatValue prints a number with the precision its size deserves.
func formatValue(v float64) string {
	switch {
	case v >= 1000:
		return groupThousands(int64(v + 0.5))
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// percentile returns the p-quantile (0..1) of ds by the nearest-rank rule.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
