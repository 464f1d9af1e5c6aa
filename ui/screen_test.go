// SPDX-License-Identifier: MIT

package ui

import (
	"strconv"
	"strings"
	"testing"
)

// renderScreen replays what a terminal program drew into the lines a person would see: the
// TUI renderer redraws only what changed (a default shown under the cursor is drawn as "s",
// and "taging" after a cursor move), so the raw byte stream is not the screen. It models
// printable text, CR, LF, cursor moves (CSI A/B/C/D/G/H), and erase (CSI K/J); every other
// escape sequence is dropped. Bounded: at most 200 lines of 400 columns.
func renderScreen(raw string) []string { return replayScreen(raw, nil) }

// screenEverShows reports whether some line of the screen read text at some moment while
// raw was drawn (a hint shown before the user typed over it).
func screenEverShows(raw, text string) bool {
	seen := false
	replayScreen(raw, func(line string) {
		if strings.Contains(line, text) {
			seen = true
		}
	})
	return seen
}

// replayScreen renders raw; onLine, if set, sees the cursor's line after every character.
func replayScreen(raw string, onLine func(string)) []string {
	const maxRows, maxCols = 200, 400
	grid := [][]rune{{}}
	row, col := 0, 0
	put := func(r rune) {
		for len(grid) <= row {
			grid = append(grid, []rune{})
		}
		for len(grid[row]) <= col {
			grid[row] = append(grid[row], ' ')
		}
		grid[row][col] = r
		if col < maxCols-1 {
			col++
		}
		if onLine != nil {
			onLine(string(grid[row]))
		}
	}
	rs := []rune(raw)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\r':
			col = 0
		case c == '\n':
			if row < maxRows-1 {
				row++
			}
		case c == 0x1b && i+1 < len(rs) && rs[i+1] == '[':
			j := i + 2
			for j < len(rs) && (rs[j] < 0x40 || rs[j] > 0x7e) {
				j++
			}
			if j >= len(rs) {
				i = len(rs)
				break
			}
			params, final := string(rs[i+2:j]), rs[j]
			i = j
			n := 1
			if v, err := strconv.Atoi(strings.SplitN(params, ";", 2)[0]); err == nil && v > 0 {
				n = v
			}
			switch final {
			case 'A':
				row = max(0, row-n)
			case 'B':
				row = min(maxRows-1, row+n)
			case 'C':
				col = min(maxCols-1, col+n)
			case 'D':
				col = max(0, col-n)
			case 'G':
				col = min(maxCols-1, n-1)
			case 'H':
				row, col = 0, 0
				if p := strings.SplitN(params, ";", 2); len(p) == 2 {
					r, _ := strconv.Atoi(p[0])
					c, _ := strconv.Atoi(p[1])
					row, col = min(maxRows-1, max(0, r-1)), min(maxCols-1, max(0, c-1))
				}
			case 'K':
				if row < len(grid) && col < len(grid[row]) {
					grid[row] = grid[row][:col]
				}
			case 'J':
				if row < len(grid) {
					if col < len(grid[row]) {
						grid[row] = grid[row][:col]
					}
					grid = grid[:row+1]
				}
			}
		case c == 0x1b:
			// OSC/DCS/other escapes: skip to the string terminator or the next byte.
			if i+1 < len(rs) && (rs[i+1] == ']' || rs[i+1] == 'P') {
				for i++; i < len(rs) && rs[i] != 0x07 && !(rs[i] == 0x1b && i+1 < len(rs) && rs[i+1] == '\\'); i++ {
				}
			} else {
				i++
			}
		case c < 0x20 || c == 0x7f:
		default:
			put(c)
		}
	}
	out := make([]string, len(grid))
	for i, l := range grid {
		out[i] = strings.TrimRight(string(l), " ")
	}
	return out
}

func TestRenderScreenReplaysCursorMoves(t *testing.T) {
	raw := "\x1b[?25l\r\x1b[J\x1b[38;5;238m┃\x1b[m \x1b[38;5;62;1m[deploy] Deploy target:\x1b[m\r\n\x1b[38;5;238m┃\x1b[m \x1b[38;5;212m> \x1b[38;5;36;7ms\x1b[m\r\n\r\n\x1b[38;5;241menter\x1b[m \x1b[38;5;239msubmit\x1b[m\x1b[2A\x1b[7D\x1b[38;5;248mtaging\x1b[K\x1b[m"
	got := renderScreen(raw)
	if len(got) < 2 || got[1] != "┃ > staging" {
		t.Fatalf("screen %q", got)
	}
	if got := renderScreen("abc\rX\x1b]0;title\x07"); got[0] != "Xbc" {
		t.Fatalf("screen %q", got)
	}
	if !screenEverShows("> w\r\n\r\nenter submit\x1b[2A\x1b[9Dorld\r\x1b[K> B", "> world") {
		t.Fatal("the hint drawn in two writes was not seen")
	}
	if screenEverShows("> w\x1b[1Dx", "> w ") {
		t.Fatal("seen text that was never on the screen")
	}
}
