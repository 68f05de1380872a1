// SPDX-License-Identifier: Apache-2.0

// Which names a namespace or task may have: they become path components of the bundle, so
// the driver checks them first, with the rule containerd v2.4's pkg/identifiers.Validate
// applies.

package driver

import "github.com/shimwalk/shimwalk/final/internal/identifiers"

// ValidateID applies containerd's identifier rule to a namespace or task id (what names it in
// the error). Ids become path components, so the driver checks them before it creates anything.
func ValidateID(what, v string) error {
	return identifiers.Validate(what, v)
}
