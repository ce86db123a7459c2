package metrics

import "sort"

// applyStickyQueueLabels is the sticky-zero rule (B63, B64) for the per-label
// queue gauge: it returns byLabel plus an explicit 0 for every label in everSeen
// that byLabel lacks, and adds every label of byLabel to everSeen. A label
// whose queue drained therefore reports 0 instead of its series vanishing
// (Prometheus would keep showing the last value for five minutes, then a
// gap). Example: {linux:3, macos:2} gives the same; then {} gives
// {linux:0, macos:0}; then {linux:1} gives {linux:1, macos:0}.
func applyStickyQueueLabels(everSeen map[string]bool, byLabel map[string]int) map[string]int {
	out := make(map[string]int, len(everSeen)+len(byLabel))
	for l := range everSeen {
		out[l] = 0
	}
	for l, n := range byLabel {
		out[l] = n
		everSeen[l] = true
	}
	return out
}

// boundLabels keeps the per-label gauge's cardinality bounded: labels
// already seen keep their own series, and new labels get one while fewer
// than limit labels were ever seen; the jobs of the others are counted
// under OverflowLabel. Which new labels fit is decided in sorted order, so
// it does not depend on map iteration.
func boundLabels(byLabel map[string]int, everSeen map[string]bool, limit int) map[string]int {
	out := make(map[string]int, len(byLabel))
	var fresh []string
	for l, n := range byLabel {
		if everSeen[l] {
			out[l] += n
		} else {
			fresh = append(fresh, l)
		}
	}
	sort.Strings(fresh)
	room := limit - len(everSeen)
	if everSeen[OverflowLabel] {
		room++ // the overflow series does not take a label's place
	}
	for _, l := range fresh {
		if room > 0 {
			out[l] += byLabel[l]
			room--
		} else {
			out[OverflowLabel] += byLabel[l]
		}
	}
	return out
}
