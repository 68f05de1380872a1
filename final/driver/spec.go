// SPDX-License-Identifier: Apache-2.0

// The OCI runtime spec of a test container and the bundle that holds it: what a client's
// default spec looks like, without an image. Mirrors containerd v2.4 pkg/oci/spec.go
// (populateDefaultUnixSpec) and the config.json that core/runtime/v2/bundle.go NewBundle
// writes.

package driver

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// SpecOptions describe the container a bundle holds.
type SpecOptions struct {
	Args []string
	Env  []string // added to a default PATH
	Cwd  string   // default "/"
	// Rootfs is the root file system. An absolute path is used as is (what `ctr run --rootfs`
	// does); empty means "rootfs" inside the bundle, for a shim that mounts the task's rootfs
	// mounts there.
	Rootfs   string
	Readonly bool
	// CgroupsPath defaults to <Driver.CgroupParent>/<namespace>/<id>.
	CgroupsPath string
}

// DefaultSpec is an OCI runtime spec close to what containerd's oci.WithDefaultSpec produces:
// fresh namespaces, the usual pseudo file systems, a small capability set, no terminal.
func DefaultSpec(namespace, id string, o SpecOptions) *specs.Spec {
	caps := []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
		"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
	}
	root := o.Rootfs
	if root == "" {
		root = bundle.RootfsDir
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = "/"
	}
	cgroups := o.CgroupsPath
	if cgroups == "" {
		cgroups = "/shimwalk/" + namespace + "/" + id
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: o.Args,
			Env:  append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, o.Env...),
			Cwd:  cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: root, Readonly: o.Readonly},
		Hostname: id,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: cgroups,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
			},
			ReadonlyPaths: []string{
				"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
}

// WriteSpec writes spec as dir/config.json.
func WriteSpec(dir string, spec *specs.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode config.json: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, bundle.ConfigFile), data)
}

// NewBundle creates the bundle of id with the config.json of DefaultSpec(o), and for a bundle
// whose rootfs the shim will mount, the empty rootfs directory.
func (d *Driver) NewBundle(id string, o SpecOptions) (string, error) {
	if len(o.Args) == 0 {
		return "", fmt.Errorf("a container needs a command")
	}
	dir, err := d.CreateBundle(id)
	if err != nil {
		return "", err
	}
	if o.Rootfs == "" {
		if err := os.Mkdir(filepath.Join(dir, bundle.RootfsDir), 0o711); err != nil {
			return "", fmt.Errorf("create rootfs directory: %w", err)
		}
	}
	if o.CgroupsPath == "" {
		o.CgroupsPath = path.Join(d.CgroupParent, d.Namespace, id)
	}
	if err := WriteSpec(dir, DefaultSpec(d.Namespace, id, o)); err != nil {
		return "", err
	}
	return dir, nil
}
