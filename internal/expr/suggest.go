package expr

import "strings"

// closest returns the candidate nearest to name by edit distance, ignoring
// case, or "" when none is close enough to be a likely typo. Candidates are
// tried in order, so the first of equally close ones wins.
func closest(name string, candidates []string) string {
	if len(name) > 64 {
		return ""
	}
	limit := max(1, min(3, len(name)/3))
	best, bestDist := "", limit+1
	lname := strings.ToLower(name)
	for _, c := range candidates {
		if len(c) > 64 || c == name {
			continue
		}
		if d := editDistance(lname, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
