// SPDX-License-Identifier: Apache-2.0

package process

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"
)

// ParseOptions reads runtime options as containerd sends them (the runc shim's
// containerd.runc.v1.Options, in an Any) and also returns the cgroup the shim should join. No
// options means the defaults; options of another type are an error, not silently ignored.
func ParseOptions(a *anypb.Any) (Options, string, error) {
	if a == nil || (a.GetTypeUrl() == "" && len(a.GetValue()) == 0) {
		return Options{}, "", nil
	}
	v, err := typeurl.UnmarshalAny(a)
	if err != nil {
		return Options{}, "", fmt.Errorf("runtime options of type %q: %v: %w", a.GetTypeUrl(), err, errdefs.ErrInvalidArgument)
	}
	o, ok := v.(*options.Options)
	if !ok {
		return Options{}, "", fmt.Errorf("runtime options of type %q: want containerd.runc.v1.Options: %w", a.GetTypeUrl(), errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(o.BinaryName, "\x00\n") || strings.ContainsAny(o.Root, "\x00\n") {
		return Options{}, "", fmt.Errorf("runtime options: binary name or root has a control character: %w", errdefs.ErrInvalidArgument)
	}
	return Options{
		BinaryName: o.BinaryName, Root: o.Root, SystemdCgroup: o.SystemdCgroup,
		NoPivotRoot: o.NoPivotRoot, NoNewKeyring: o.NoNewKeyring,
		IoUID: int(o.IoUid), IoGID: int(o.IoGid),
		CriuImagePath: o.CriuImagePath, CriuWorkPath: o.CriuWorkPath,
	}, o.ShimCgroup, nil
}

// ParseCheckpointOptions reads Checkpoint's options (containerd.runc.v1.CheckpointOptions).
func ParseCheckpointOptions(a *anypb.Any) (*options.CheckpointOptions, error) {
	if a == nil || a.GetTypeUrl() == "" {
		return &options.CheckpointOptions{}, nil
	}
	v, err := typeurl.UnmarshalAny(a)
	if err != nil {
		return nil, fmt.Errorf("checkpoint options of type %q: %v: %w", a.GetTypeUrl(), err, errdefs.ErrInvalidArgument)
	}
	o, ok := v.(*options.CheckpointOptions)
	if !ok {
		return nil, fmt.Errorf("checkpoint options of type %q: %w", a.GetTypeUrl(), errdefs.ErrInvalidArgument)
	}
	return o, nil
}

// ParseProcessSpec reads an exec's process spec, which containerd sends as JSON in an Any.
func ParseProcessSpec(a *anypb.Any) (*specs.Process, error) {
	if a == nil || len(a.GetValue()) == 0 {
		return nil, fmt.Errorf("exec without a process spec: %w", errdefs.ErrInvalidArgument)
	}
	var p specs.Process
	if err := json.Unmarshal(a.GetValue(), &p); err != nil {
		return nil, fmt.Errorf("exec process spec is not JSON: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(p.Args) == 0 {
		return nil, fmt.Errorf("exec process spec has no args: %w", errdefs.ErrInvalidArgument)
	}
	return &p, nil
}

// ParseResources reads Update's resources, which containerd sends as JSON LinuxResources.
func ParseResources(a *anypb.Any) (*specs.LinuxResources, error) {
	if a == nil || len(a.GetValue()) == 0 {
		return nil, fmt.Errorf("update without resources: %w", errdefs.ErrInvalidArgument)
	}
	var r specs.LinuxResources
	if err := json.Unmarshal(a.GetValue(), &r); err != nil {
		return nil, fmt.Errorf("resources are not LinuxResources JSON: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return &r, nil
}

// ValidateID applies containerd's identifier rule (pkg/identifiers): letters and digits,
// joined by single '.', '_' or '-', at most 76 long. Ids name files and runc state.
func ValidateID(what, v string) error {
	if v == "" {
		return fmt.Errorf("%s is required: %w", what, errdefs.ErrInvalidArgument)
	}
	if len(v) > 76 {
		return fmt.Errorf("%s %.20q... is longer than 76 characters: %w", what, v, errdefs.ErrInvalidArgument)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(v); i++ {
		c := v[i]
		if alnum(c) {
			continue
		}
		if (c != '.' && c != '_' && c != '-') || i == 0 || i == len(v)-1 || !alnum(v[i-1]) || !alnum(v[i+1]) {
			return fmt.Errorf("%s %q is not a valid identifier: %w", what, v, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
