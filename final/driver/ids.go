// SPDX-License-Identifier: Apache-2.0

package driver

import "fmt"

// ValidateID applies containerd's identifier rule (pkg/identifiers in containerd v2.4) to a
// namespace or task id: letters and digits, joined by single '.', '_' or '-', at most 76 long.
// Ids become path components, so the driver checks them before it creates anything.
func ValidateID(what, v string) error {
	if v == "" {
		return fmt.Errorf("%s must not be empty", what)
	}
	if len(v) > 76 {
		return fmt.Errorf("%s %.20q... is longer than 76 characters", what, v)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(v); i++ {
		c := v[i]
		if alnum(c) {
			continue
		}
		if c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%s %q: character %q is not allowed", what, v, c)
		}
		if i == 0 || i == len(v)-1 || !alnum(v[i-1]) || !alnum(v[i+1]) {
			return fmt.Errorf("%s %q: %q must stand between letters or digits", what, v, c)
		}
	}
	return nil
}
