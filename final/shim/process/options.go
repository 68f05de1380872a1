// SPDX-License-Identifier: Apache-2.0

// The options of the requests, decoded from the Anys containerd sends: Create's runtime
// options, Checkpoint's options, an exec's process spec and Update's resources, as containerd
// v2.4's runc shim decodes them in runc.NewContainer and Container.Checkpoint
// (cmd/containerd-shim-runc-v2/runc/container.go) and in process.Init's exec and update
// (process/init.go).

package process

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shimwalk/shimwalk/final/internal/bundle"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ParseOptions reads runtime options as containerd sends them and also returns the cgroup the
// shim should join. Two types are understood: the runc shim's containerd.runc.v1.Options, and
// runtimeoptions.v1.Options, which containerd sends for runtimes other than runc (from a CRI
// runtime handler's options, or ctr's --runtime-config-path) and whose TOML config carries the
// same fields. No options means the defaults; options of another type are an error.
func ParseOptions(a *anypb.Any) (bundle.Options, string, error) {
	if a == nil || (a.GetTypeUrl() == "" && len(a.GetValue()) == 0) {
		return bundle.Options{}, "", nil
	}
	v, err := typeurl.UnmarshalAny(a)
	if err != nil {
		return bundle.Options{}, "", fmt.Errorf("runtime options of type %q: %v: %w", a.GetTypeUrl(), err, errdefs.ErrInvalidArgument)
	}
	var o *options.Options
	switch v := v.(type) {
	case *options.Options:
		o = v
	case *runtimeoptions.Options:
		if o, err = fromConfig(v); err != nil {
			return bundle.Options{}, "", err
		}
	default:
		return bundle.Options{}, "", fmt.Errorf("runtime options of type %q: want containerd.runc.v1.Options or runtimeoptions.v1.Options: %w", a.GetTypeUrl(), errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(o.BinaryName, "\x00\n") || strings.ContainsAny(o.Root, "\x00\n") {
		return bundle.Options{}, "", fmt.Errorf("runtime options: binary name or root has a control character: %w", errdefs.ErrInvalidArgument)
	}
	return bundle.Options{
		BinaryName: o.BinaryName, Root: o.Root, SystemdCgroup: o.SystemdCgroup,
		NoPivotRoot: o.NoPivotRoot, NoNewKeyring: o.NoNewKeyring,
		IoUID: int(o.IoUid), IoGID: int(o.IoGid),
		CriuImagePath: o.CriuImagePath, CriuWorkPath: o.CriuWorkPath,
	}, o.ShimCgroup, nil
}

// IsOptions reports whether a holds runtime options of a type ParseOptions reads, judging by
// its type URL alone.
func IsOptions(a *anypb.Any) bool {
	name := a.MessageName()
	return name != "" && (name == proto.MessageName(&options.Options{}) || name == proto.MessageName(&runtimeoptions.Options{}))
}

// runcConfig is the TOML form of the runc options, as a CRI runtime handler writes them.
type runcConfig struct {
	BinaryName    string
	Root          string
	SystemdCgroup bool
	NoPivotRoot   bool
	NoNewKeyring  bool
	IoUid         uint32
	IoGid         uint32
	CriuImagePath string
	CriuWorkPath  string
	ShimCgroup    string
}

// fromConfig reads the TOML config that runtimeoptions carry, inline or in a file.
func fromConfig(r *runtimeoptions.Options) (*options.Options, error) {
	body, path := r.GetConfigBody(), ""
	if len(body) == 0 && r.GetConfigPath() != "" {
		path = r.GetConfigPath()
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("runtime config path %q is not absolute: %w", path, errdefs.ErrInvalidArgument)
		}
		var err error
		if body, err = readConfigFile(path); err != nil {
			return nil, err
		}
	}
	c, err := decodeRuncConfig(body)
	if err != nil && path != "" {
		return nil, fmt.Errorf("runtime config %s: %s: %w", path, configFileError(err), errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, fmt.Errorf("runtime config: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return &options.Options{
		BinaryName: c.BinaryName, Root: c.Root, SystemdCgroup: c.SystemdCgroup, NoPivotRoot: c.NoPivotRoot,
		NoNewKeyring: c.NoNewKeyring, IoUid: c.IoUid, IoGid: c.IoGid, CriuImagePath: c.CriuImagePath,
		CriuWorkPath: c.CriuWorkPath, ShimCgroup: c.ShimCgroup,
	}, nil
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
