// Package suggest finds the "did you mean" for a misspelt name: a
// workflow key, an expression's context or function. One rule for every
// hint, so kiln lint and the expression checker agree on what a typo is.
package suggest

import "strings"

// maxLen bounds the names compared: longer ones are never typos of the
// short names kiln suggests, and the distance costs len(a)·len(b).
const maxLen = 64

// Closest returns the candidate nearest to word, ignoring case, when it is
// close enough to be a likely typo, and "" otherwise. A candidate equal to
// word is never suggested; of equally near ones, the first wins.
func Closest(word string, candidates []string) string {
	if len(word) > maxLen {
		return ""
	}
	lw := strings.ToLower(word)
	best, bestDist := "", max(1, min(3, len(word)/3))+1
	for _, c := range candidates {
		if c == word || len(c) > maxLen {
			continue
		}
		lc := strings.ToLower(c)
		d := Distance(lw, lc)
		if len(lw) >= 3 && (strings.HasPrefix(lc, lw) || strings.HasPrefix(lw, lc)) {
			d = min(d, 1) // "bool" for "boolean"
		}
		if d < bestDist && d < min(len(lw), len(lc)) {
			best, bestDist = c, d
		}
	}
	return best
}

// Distance is the optimal-string-alignment distance between a and b, in
// bytes: inserting, deleting or replacing a byte, or swapping two
// neighbours ("og" for "go"), each costs one.
func Distance(a, b string) int {
	// Three rows: the one before last (for swaps), the last, the current.
	pprev := make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pprev[j-2]+1)
			}
		}
		pprev, prev, cur = prev, cur, pprev
	}
	return prev[len(b)]
}
