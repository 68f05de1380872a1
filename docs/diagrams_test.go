// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scenario is what a diagram draws: shell commands run in a sandbox, with $SHIMCTL standing for
// bin/shimctl with the step's shim, a private namespace ($NAMESPACE) and --trace $TRACE, and
// $UNTRACED for the same without --trace, to wait for something without drawing the waiting.
// A step shim started by a traced command adds its own trace points to $TRACE for as long as it
// lives, so a wait that calls it would be drawn after all: such a wait reads $TRACE instead.
type scenario struct {
	step   string // the shim: "01".."06", or "" for the final shim
	script string
}

// scenarios are the diagrams `make docs` draws, by name (docs/diagrams/NAME.mmd). Each shows
// the step's mechanism at work: steps 01 and 02 cannot run a container, so they show the shim's
// life; steps 03 and 04 have no Wait, so the exit is read with State once the container is
// done (step 04 learns it is from the shim's trace point); step 05 runs runc through a wrapper
// whose start returns only once the shim has held the container's exit, so the exit is early
// every time; step 06 lets the container exit while no shimctl is connected (exit.json tells when),
// and a later one finds the shim again (the events go to a `shimctl events` that listens throughout, as containerd
// does).
var scenarios = map[string]scenario{
	"01-bootstrap": {"01", `$SHIMCTL shim start demo
$SHIMCTL shim delete demo`},
	"02-ttrpc": {"02", `$SHIMCTL shim start demo
$SHIMCTL task connect demo
$SHIMCTL task state demo
$SHIMCTL shim shutdown demo
$SHIMCTL shim delete demo`},
	"03-runc-create": {"03", `$SHIMCTL run -d demo -- /bin/sh -c 'exit 3'
until $UNTRACED task state demo | grep -q STOPPED; do sleep 0.05; done
$SHIMCTL task state demo
$SHIMCTL task delete demo`},
	"04-subreaper": {"04", `$SHIMCTL run -d demo -- /bin/sh -c 'exit 3'
until grep -q "kept for State" "$TRACE"; do sleep 0.05; done
$SHIMCTL task state demo
$SHIMCTL task delete demo`},
	"05-wait-events": {"05", `mkdir -p "$SHIMCTL_STATE"
cat >"$SHIMCTL_STATE/runc" <<'END'
#!/bin/sh
runc "$@" || exit
for a; do
  if [ "$a" = start ]; then
    until grep -q "held: its Start" "$SHIMWALK_TRACE"; do sleep 0.05; done
  fi
done
END
chmod +x "$SHIMCTL_STATE/runc"
export SHIMWALK_RUNC="$SHIMCTL_STATE/runc"
$SHIMCTL run --rm demo -- /bin/sh -c 'echo hi; exit 3'`},
	"06-reconnect": {"06", `$SHIMCTL events >/dev/null 2>&1 &
listener=$!
until [ -S "$SHIMCTL_STATE/events.sock" ]; do sleep 0.05; done
$SHIMCTL run -d demo -- /bin/sh -c 'sleep 0.3; exit 3'
until [ -e "$SHIMCTL_STATE/$NAMESPACE/demo/exit.json" ]; do sleep 0.05; done
$SHIMCTL task state demo
$SHIMCTL task delete demo
kill $listener; wait $listener`},
	// The final shim's mechanisms, for docs/07-final.md, each with a `shimctl events` that
	// listens throughout, as containerd does. 07-exec: the exec's exit is published before the
	// init's. 07-group: two tasks of one group get one shim. 07-terminal: run -t
	// needs a terminal on shimctl's side, which script(1) provides, at a size run sends with
	// ResizePty. 07-log: the output goes to a file:// log URI. 07-cgroups: Update and Stats.
	"07-exec": {"", `$SHIMCTL events >/dev/null 2>&1 &
listener=$!
until [ -S "$SHIMCTL_STATE/events.sock" ]; do sleep 0.05; done
$SHIMCTL run -d demo -- sleep 100
$SHIMCTL task exec -d --exec-id bg demo -- sleep 100
$SHIMCTL task kill -s KILL demo
$SHIMCTL task wait demo
$SHIMCTL task delete demo
kill $listener; wait $listener`},
	"07-group": {"", `$SHIMCTL events >/dev/null 2>&1 &
listener=$!
until [ -S "$SHIMCTL_STATE/events.sock" ]; do sleep 0.05; done
for id in a b; do
  mkdir -p "$SHIMCTL_STATE/$NAMESPACE/$id"
  echo '{"annotations": {"io.containerd.shimwalk.v2.group": "pod-1"}}' >"$SHIMCTL_STATE/$NAMESPACE/$id/config.json"
  $SHIMCTL shim start $id
done
$SHIMCTL shim shutdown a
$SHIMCTL shim delete a
$SHIMCTL shim delete b
kill $listener; wait $listener`},
	"07-terminal": {"", `$SHIMCTL events >/dev/null 2>&1 &
listener=$!
until [ -S "$SHIMCTL_STATE/events.sock" ]; do sleep 0.05; done
script -qec "stty rows 30 cols 100; $SHIMCTL run -t --rm demo -- stty size" /dev/null </dev/null
kill $listener; wait $listener`},
	"07-log": {"", `$SHIMCTL events >/dev/null 2>&1 &
listener=$!
until [ -S "$SHIMCTL_STATE/events.sock" ]; do sleep 0.05; done
$SHIMCTL run -d --log "file://$SHIMCTL_STATE/demo.log" demo -- echo to the log
$SHIMCTL task wait demo
$SHIMCTL task delete demo
kill $listener; wait $listener`},
	"07-cgroups": {"", `$SHIMCTL events >/dev/null 2>&1 &
listener=$!
until [ -S "$SHIMCTL_STATE/events.sock" ]; do sleep 0.05; done
$SHIMCTL run -d demo -- sleep 100
$SHIMCTL task update --memory 64m demo
$SHIMCTL task stats demo
$SHIMCTL task kill -s KILL demo
$SHIMCTL task wait demo
$SHIMCTL task delete demo
kill $listener; wait $listener`},
}

// draw runs the scenario of name in a sandbox and returns the diagram of its trace.
func draw(t *testing.T, root, name string, sc scenario) (string, error) {
	s := newSandbox(t)
	shim := "bin/containerd-shim-shimwalk-v2"
	if sc.step != "" {
		shim = "bin/containerd-shim-step" + sc.step + "-v2"
	}
	trace := filepath.Join(s.dir, "trace.jsonl")
	// A namespace per diagram keeps the containers' cgroups apart while diagrams run side by
	// side. Commands may fail on purpose (a step that lacks an RPC): only the trace counts.
	ns := "docs" + strings.ReplaceAll(name, "-", "")
	script := fmt.Sprintf("NAMESPACE=%s\nTRACE=%s\nUNTRACED='bin/shimctl -n %s --shim %s'\nSHIMCTL=\"$UNTRACED --trace $TRACE\"\n%s\n",
		ns, trace, ns, shim, sc.script)
	_, stderr, err := s.run(root, script)
	if _, statErr := os.Stat(trace); statErr != nil {
		return "", fmt.Errorf("no trace: %v (%v)\n%s", statErr, err, stderr)
	}
	out, stderr2, err := s.run(root, "bin/shimctl trace mermaid "+trace)
	if err != nil {
		return "", fmt.Errorf("trace mermaid: %v\n%s", err, stderr2)
	}
	return out, nil
}

// isEvent tells the lines of a diagram that events put there: where they fall among the calls
// depends on when they arrived. The long-lived shim's own notes are among them: it runs beside
// the commands (it starts serving while its helper exits, and handles an exit when it comes).
func isEvent(line string) bool {
	return strings.Contains(line, "-)") || strings.Contains(line, "seen through TaskExit") ||
		strings.HasPrefix(strings.TrimSpace(line), "Note over shim:")
}

// sameDiagram compares two diagrams masked: the lines in order, but the events as a set.
func sameDiagram(a, b string) bool {
	return diagramKey(mask(a, "")) == diagramKey(mask(b, ""))
}

func diagramKey(d string) string {
	var ordered, events []string
	for _, l := range strings.Split(strings.TrimSpace(d), "\n") {
		switch {
		case isEvent(l):
			events = append(events, l)
		default:
			ordered = append(ordered, l)
		}
	}
	slices.Sort(events)
	return strings.Join(ordered, "\n") + "\n--- events\n" + strings.Join(events, "\n")
}

// diagramPath is where the diagram name is kept.
func diagramPath(root, name string) string {
	return filepath.Join(root, "docs", "diagrams", name+".mmd")
}

// writeDiagram compares a fresh diagram with the one kept, masked, or with update writes it
// when they differ (a diagram that only differs in durations or pids is left as it is).
func writeDiagram(root, name, fresh string, update bool) []problem {
	path := diagramPath(root, name)
	rel := filepath.Join("docs", "diagrams", name+".mmd")
	kept, err := os.ReadFile(path)
	if err == nil && sameDiagram(string(kept), fresh) {
		return nil
	}
	if update {
		if err := os.WriteFile(path, []byte(fresh), 0o644); err != nil {
			return []problem{{file: rel, msg: err.Error()}}
		}
		return nil
	}
	if err != nil {
		return []problem{{file: rel, msg: "missing (go test ./docs -update draws it): " + err.Error()}}
	}
	return []problem{{file: rel, line: 1, msg: "differs from a fresh run of its scenario (go test ./docs -update redraws it)\n" +
		firstDifference(diagramKey(mask(string(kept), "")), diagramKey(mask(fresh, "")))}}
}

// checkDiagramBlocks compares the diagram blocks of p with the files they name, or with
// update copies the files in.
func checkDiagramBlocks(root string, p *page, update bool) (bool, []problem) {
	var probs []problem
	changed := false
	for i := range p.blocks {
		b := p.blocks[i]
		if b.kind != kindDiagram {
			continue
		}
		name := strings.TrimSpace(b.arg)
		if _, ok := scenarios[name]; !ok {
			probs = append(probs, problem{p.path, b.line, b.marker(), fmt.Sprintf("no scenario draws %q (the table in docs/diagrams_test.go has %s)", name, strings.Join(scenarioNames(), ", "))})
			continue
		}
		data, err := os.ReadFile(diagramPath(root, name))
		if err != nil {
			probs = append(probs, problem{p.path, b.line, b.marker(), "no diagram yet (go test ./docs -update draws it)"})
			continue
		}
		if p.content(b) == string(data) {
			continue
		}
		if update {
			changed = p.replace(b, string(data)) || changed
			continue
		}
		probs = append(probs, problem{p.path, b.line, b.marker(), "the block is not docs/diagrams/" + name + ".mmd (go test ./docs -update copies it)\n" + firstDifference(p.content(b), string(data))})
	}
	return changed, probs
}

func scenarioNames() []string {
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
