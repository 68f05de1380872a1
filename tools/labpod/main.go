// SPDX-License-Identifier: Apache-2.0

// Command labpod is the workshop's pod lab (make lab-pod): a private containerd 2.x with its CRI
// plugin runs, through crictl, a pod of two containers on the final shim, shows the one shim
// that serves them all, and removes everything again. See docs/workshop.md.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/shimwalk/shimwalk/final/driver"
)

func main() {
	shim := flag.String("shim", "bin/containerd-shim-shimwalk-v2", "the final shim's binary (make build)")
	explore := flag.Bool("explore", false, "wait for Enter before tearing the pod down, to look around with crictl")
	flag.Parse()
	if err := run(*shim, *explore); err != nil {
		fmt.Fprintln(os.Stderr, "labpod:", err)
		os.Exit(1)
	}
}

func run(shim string, explore bool) error {
	if os.Getuid() != 0 {
		return fmt.Errorf("run as root: containers need it")
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	lab, err := NewLab(root, shim)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "shimwalk-lab.")
	if err != nil {
		return err
	}
	lab.Dir = dir
	lab.Out = os.Stdout
	if explore {
		lab.Explore = func(crictl string) {
			fmt.Printf("\nThe pod runs. In another terminal, try:\n  %s pods\n  %s ps\n  ps -ef --forest\n"+
				"Press Enter to tear it down.\n", crictl, crictl)
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		}
	}
	// An interrupt cancels the command at hand; Run still tears everything down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = lab.Run(ctx)
	if mounts, _ := driver.MountsUnderIn("/proc/self/mountinfo", dir); len(mounts) > 0 {
		return fmt.Errorf("%v (mounts left under %s: %v; not removing it)", err, dir, mounts)
	}
	if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
		err = rerr
	}
	if err == nil {
		fmt.Printf("\n==> Done: containerd, the shim and every container are gone, and %s is removed\n", dir)
	}
	return err
}

// NewLab finds what the lab runs: the shim (relative to the repo root unless absolute),
// containerd 2.x and crictl where scripts/containerd2.sh and scripts/crictl.sh build them, and a
// static busybox on PATH.
func NewLab(repoRoot, shim string) (*Lab, error) {
	if !filepath.IsAbs(shim) {
		shim = filepath.Join(repoRoot, shim)
	}
	if _, err := os.Stat(shim); err != nil {
		return nil, fmt.Errorf("the final shim: %w (make build builds it)", err)
	}
	version, err := driver.Containerd2Version(repoRoot)
	if err != nil {
		return nil, err
	}
	if _, err := driver.ReleaseConfig(version); err != nil {
		return nil, err
	}
	crictl, err := CrictlPath(repoRoot)
	if err != nil {
		return nil, err
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (install busybox-static)", err)
	}
	return &Lab{Shim: shim, ContainerdVersion: version, Crictl: crictl, Busybox: busybox}, nil
}

// CrictlPath is where scripts/crictl.sh (below repoRoot) builds the crictl version it names.
func CrictlPath(repoRoot string) (string, error) {
	script := filepath.Join(repoRoot, "scripts", "crictl.sh")
	data, err := os.ReadFile(script)
	if err != nil {
		return "", fmt.Errorf("crictl version: %w", err)
	}
	var version string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CRICTL_VERSION="); ok {
			version = strings.TrimSpace(v)
		}
	}
	if version == "" {
		return "", fmt.Errorf("%s sets no CRICTL_VERSION", script)
	}
	cache := os.Getenv("SHIMWALK_CACHE")
	if cache == "" {
		cache = "/var/cache/shimwalk"
	}
	path := filepath.Join(cache, "crictl-"+version, "bin", "crictl")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("crictl %s is not built in %s (scripts/crictl.sh builds it)", version, filepath.Dir(path))
	}
	return path, nil
}
