// SPDX-License-Identifier: Apache-2.0

// Package identifiers is containerd's rule for names that become paths (pkg/identifiers in
// containerd v2.4): namespaces, task ids and exec ids. The driver and the shim both check it,
// before they build a path from a name.
package identifiers

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// maxLength is the longest identifier allowed.
const maxLength = 76

// Validate checks v, named what in the error: letters and digits, joined by single '.', '_' or
// '-', at most 76 characters long (maxLength). The error wraps errdefs.ErrInvalidArgument.
func Validate(what, v string) error {
	if v == "" {
		return fmt.Errorf("%s is required: %w", what, errdefs.ErrInvalidArgument)
	}
	if len(v) > maxLength {
		return fmt.Errorf("%s %.20q... is longer than %d characters: %w", what, v, maxLength, errdefs.ErrInvalidArgument)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(v); i++ {
		c := v[i]
		if alnum(c) {
			continue
		}
		if c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%s %q: character %q is not allowed: %w", what, v, c, errdefs.ErrInvalidArgument)
		}
		if i == 0 || i == len(v)-1 || !alnum(v[i-1]) || !alnum(v[i+1]) {
			return fmt.Errorf("%s %q: %q must stand between letters or digits: %w", what, v, c, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
