// SPDX-License-Identifier: Apache-2.0

// The pod lab: containerd 2.x with its CRI plugin, driven by crictl as kubelet drives it, runs a
// pod of two containers on the final shim, which serves the whole pod from one process. Under
// containerd v2.4 containerd itself sends a pod's containers to the sandbox's shim
// (ShimManager.Start in core/runtime/v2), because the shim's start answered Task API version 3;
// a containerd that runs start for every container (1.x) meets the io.kubernetes.cri.sandbox-id
// annotation there instead, which the shim groups by as containerd v2.4's runc shim does in
// manager.Start.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
)

// Lab is what one run of the lab needs.
type Lab struct {
	Shim              string // the final shim's binary
	ContainerdVersion string // the containerd 2.x that scripts/containerd2.sh built
	Crictl            string
	Busybox           string // a static busybox, for the images
	Dir               string // everything of the run lives below it; short, for socket paths
	Out               io.Writer
	// Explore, when set, runs once the pod's two containers run, before anything is torn
	// down: make lab-pod waits there for the learner to look around.
	Explore func(crictl string)
}

// Result is what the run saw while the pod ran.
type Result struct {
	PodID      string
	Containers map[string]string // name -> id
	Pids       map[string]int    // "pod" and each container's name -> its process
	// Sandbox is, per container, the pod id containerd wrote into the container's bundle when
	// it connected the container to the sandbox's shim instead of running the shim's start.
	Sandbox    map[string]string
	Shims      []Shim // the shims of this containerd while the pod ran
	ShimsAfter []int  // the shims still there once the pod was removed
}

// Shim is a shim process as the lab saw it while the pod ran.
type Shim struct {
	driver.Proc
	ID string // its -id: the instance containerd started it as
}

// shimwalkRuntime is the runtime handler name the lab registers with CRI, as a Kubernetes
// RuntimeClass would name it.
const shimwalkRuntime = "shimwalk"

// Run runs the lab and tears everything down again, whatever happened.
func (l *Lab) Run(ctx context.Context) (res Result, err error) {
	res = Result{Containers: map[string]string{}, Pids: map[string]int{}, Sandbox: map[string]string{}}
	// Containers go in a cgroup of the lab's own, removed at the end.
	cgroupParent := fmt.Sprintf("shimwalk-lab-%d", os.Getpid())
	release, err := driver.ReleaseConfig(l.ContainerdVersion)
	if err != nil {
		return res, err
	}
	release.Dir = filepath.Join(l.Dir, "ctd")
	release.Namespace = "k8s.io"
	// CRI's namespace is also a Kubernetes node's: the lab's containerd removes only the k8s.io
	// cgroups it made, never the node's pods'.
	release.SharedNamespace = true
	release.RuncRoot = filepath.Join(l.Dir, "runc")
	release.Disabled = withoutCRI(release.Disabled)
	release.LogLevel = "info"
	release.Extra = l.criConfig()
	ctd, err := driver.StartContainerd(release)
	if err != nil {
		return res, err
	}
	defer func() {
		ctd.Stop()
		driver.RemoveCgroups(cgroupParent)
	}()
	l.say("containerd %s runs with its CRI plugin at %s; its config is %s", l.ContainerdVersion,
		ctd.Address, filepath.Join(ctd.Dir, "config.toml"))

	cfg := filepath.Join(l.Dir, "crictl.yaml")
	endpoint := "unix://" + ctd.Address
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", endpoint, endpoint)), 0o600); err != nil {
		return res, fmt.Errorf("crictl config: %w", err)
	}
	crictlLine := l.Crictl + " --config " + cfg
	fmt.Fprintf(l.Out, "    below, crictl stands for: %s\n", crictlLine)
	crictl := func(args ...string) (string, error) {
		return l.show(ctx, "crictl", append([]string{l.Crictl, "--config", cfg}, args...)...)
	}

	l.say("No registry: the sandbox (pause) image and the container image are built from %s and imported", l.Busybox)
	archive := filepath.Join(l.Dir, "images.tar")
	if err := WriteImages(archive, l.Busybox); err != nil {
		return res, err
	}
	if _, err := l.run("ctr", ctd.CtrCommand(ctx, "images", "import", archive)); err != nil {
		return res, err
	}
	if _, err := crictl("images"); err != nil {
		return res, err
	}

	l.say("A pod on the runtime handler %q (the shim %s), in the node's network: the lab has no CNI", shimwalkRuntime, l.Shim)
	logs := filepath.Join(l.Dir, "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return res, fmt.Errorf("pod logs: %w", err)
	}
	podJSON := filepath.Join(l.Dir, "pod.json")
	pod := map[string]any{
		"metadata":      map[string]any{"name": "lab", "namespace": "default", "uid": fmt.Sprintf("lab-%d", os.Getpid())},
		"log_directory": logs,
		"linux": map[string]any{
			"cgroup_parent": "/" + cgroupParent,
			// 2 is NODE: the host's network namespace, so CRI needs no CNI plugin.
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}},
		},
	}
	if err := writeJSON(podJSON, pod); err != nil {
		return res, err
	}
	out, err := crictl("runp", "--runtime", shimwalkRuntime, podJSON)
	if err != nil {
		return res, err
	}
	res.PodID = strings.TrimSpace(out)
	defer func() {
		// Removing the pod stops and removes its containers too.
		if _, rerr := crictl("rmp", "--force", res.PodID); rerr != nil && err == nil {
			err = rerr
		}
		if err == nil {
			res.ShimsAfter = l.waitShimsGone(ctd.Address)
			l.say("The pod is gone, and so is its shim: %d shims of this containerd remain", len(res.ShimsAfter))
		}
	}()

	l.say("Two containers in the pod, from the imported image: create does not pull (--no-pull)")
	for _, name := range []string{"one", "two"} {
		path := filepath.Join(l.Dir, name+".json")
		c := map[string]any{
			"metadata": map[string]any{"name": name},
			"image":    map[string]any{"image": BusyboxImage},
			"command":  []string{"sh", "-c", "echo " + name + " runs; exec sleep inf"},
			"log_path": name + ".log",
		}
		if err := writeJSON(path, c); err != nil {
			return res, err
		}
		out, err := crictl("create", "--no-pull", res.PodID, path, podJSON)
		if err != nil {
			return res, err
		}
		id := strings.TrimSpace(out)
		res.Containers[name] = id
		if _, err := crictl("start", id); err != nil {
			return res, err
		}
	}
	if _, err := crictl("ps"); err != nil {
		return res, err
	}

	l.say("One shim serves the pod: the one started for the sandbox, with the pod's id as its -id")
	for _, pid := range ctd.Shims("") {
		p, err := driver.ReadProc(pid)
		if err != nil {
			return res, fmt.Errorf("shim %d: %w", pid, err)
		}
		res.Shims = append(res.Shims, Shim{Proc: p, ID: driver.FlagValue(driver.Cmdline(pid), "id")})
	}
	pods, err := l.pidOf(ctx, cfg, "inspectp", res.PodID)
	if err != nil {
		return res, err
	}
	res.Pids["pod"] = pods
	for name, id := range res.Containers {
		pid, err := l.pidOf(ctx, cfg, "inspect", id)
		if err != nil {
			return res, err
		}
		res.Pids[name] = pid
	}
	args := []string{"ps", "-o", "pid,ppid,args", "-p"}
	var pids []string
	for _, s := range res.Shims {
		pids = append(pids, fmt.Sprint(s.Pid))
		for _, c := range s.Children {
			pids = append(pids, fmt.Sprint(c))
		}
	}
	if _, err := l.show(ctx, "ps", append(args, strings.Join(pids, ","))...); err != nil {
		return res, err
	}
	fmt.Fprintf(l.Out, "    the pod's sandbox is process %d, container one %d, container two %d\n",
		res.Pids["pod"], res.Pids["one"], res.Pids["two"])

	l.say("containerd sent the containers there itself: the shim's start answered version 3, so containerd connects a pod's containers to the sandbox's shim and notes the pod in each bundle")
	for _, name := range []string{"one", "two"} {
		path := filepath.Join(ctd.Bundle(res.Containers[name]), "sandbox")
		out, err := l.show(ctx, "cat", "cat", path)
		if err != nil {
			return res, err
		}
		fmt.Fprintln(l.Out)
		res.Sandbox[name] = out
	}
	fmt.Fprintf(l.Out, "    (containerd 1.x runs the shim's start for every container; the shim then finds the pod's\n"+
		"    shim by the io.kubernetes.cri.sandbox-id annotation CRI puts in every spec of the pod)\n")
	l.say("Inside container one, the pod's PID namespace: the sandbox's sleep is PID 1, and both containers are there")
	if _, err := crictl("exec", res.Containers["one"], "ps", "-o", "pid,args"); err != nil {
		return res, err
	}

	if l.Explore != nil {
		l.Explore(crictlLine)
	}
	l.say("crictl rmp --force stops and removes both containers and the pod")
	return res, nil
}

// withoutCRI is disabled less the plugins that make up CRI (NRI stays off: it would listen on a
// host-wide socket).
func withoutCRI(disabled []string) []string {
	var out []string
	for _, p := range disabled {
		if strings.Contains(p, ".cri") || strings.HasPrefix(p, "io.containerd.podsandbox.") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// criConfig registers the shim as the runtime handler "shimwalk", pins the sandbox image so
// that CRI never pulls it, points CNI at an empty directory of the lab's own, and keeps the
// streaming server (crictl exec) on a free loopback port.
func (l *Lab) criConfig() string {
	return fmt.Sprintf(`[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  # CRI gives the sandbox an oom_score_adj of -998, which needs CAP_SYS_RESOURCE; a machine that
  # is itself a container may lack it (runc then fails with "can't get final child's PID").
  # Restricted, no process gets a lower score than containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = %q
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s]
      runtime_type = "io.containerd.shimwalk.v2"
      runtime_path = %q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, PauseImage, filepath.Join(l.Dir, "cni", "bin"), filepath.Join(l.Dir, "cni", "net.d"),
		shimwalkRuntime, shimwalkRuntime, l.Shim)
}

// pidOf reads a pod's or a container's process from crictl inspect(p)'s verbose info.
func (l *Lab) pidOf(ctx context.Context, cfg, verb, id string) (int, error) {
	out, err := exec.CommandContext(ctx, l.Crictl, "--config", cfg, verb, "-o", "json", id).Output()
	if err != nil {
		return 0, fmt.Errorf("crictl %s %s: %w", verb, id, err)
	}
	var v struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Info.Pid == 0 {
		return 0, fmt.Errorf("crictl %s %s: no pid in its info (%v)", verb, id, err)
	}
	return v.Info.Pid, nil
}

// waitShimsGone waits for the pod's shim to exit after the pod's removal (containerd's Shutdown
// ends it, and it is no longer a shim of this containerd once it has) and returns what remains.
func (l *Lab) waitShimsGone(address string) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := driver.ShimsOf(address)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *Lab) say(format string, args ...any) {
	fmt.Fprintf(l.Out, "\n==> "+format+"\n", args...)
}

// show prints a command as the learner would type it (name for the program), runs it, prints
// its output and returns its standard output.
func (l *Lab) show(ctx context.Context, name string, argv ...string) (string, error) {
	return l.run(name, exec.CommandContext(ctx, argv[0], argv[1:]...))
}

// run is show for a command already built.
func (l *Lab) run(name string, cmd *exec.Cmd) (string, error) {
	fmt.Fprintf(l.Out, "$ %s %s\n", name, strings.Join(cmd.Args[1:], " "))
	var stdout, stderr bytes.Buffer
	cmd.Stdout = io.MultiWriter(&stdout, l.Out)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(cmd.Args[1:], " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
