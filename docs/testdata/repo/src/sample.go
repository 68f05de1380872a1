// SPDX-License-Identifier: Apache-2.0

package sample

// counter counts what it is told to.
type counter struct{ n int }

// Add adds d; a negative d is refused.
func (c *counter) Add(d int) bool {
	if d < 0 {
		return false
	}
	c.n += d
	return true
}

// twice is d added twice.
func twice(d int) int {
	var c counter
	c.Add(d)
	c.Add(d)
	return c.n
}

const (
	// limit is the largest count.
	limit = 10
	other = 2
)
