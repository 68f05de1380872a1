// SPDX-License-Identifier: Apache-2.0

// The events command plays containerd's ttrpc Events service for the shims of a state
// directory, and prints what they forward as `ctr events` does (containerd v2.4
// cmd/ctr/commands/events), one event a line.

package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/driver"
)

func eventsCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events [--json]",
		Short: "Serve containerd's Events service and print each event shims forward",
		Long: `events listens where the shims of the state directory forward their task events
(STATE/events.sock, their TTRPC_ADDRESS) and prints each event on one line as it
arrives: time, namespace, topic and the event's fields, such as
"container=demo pid=1234 exit_status=0". With --json each line is a JSON
object instead. It runs until SIGINT or SIGTERM.

Shims forward events from step 05 on. A shim that finds nobody listening retries
each event a few times and then drops it, as containerd's shims do, and a
shim that is shutting down waits for that before it exits.`,
		Example: `  shimctl events &
  shimctl --shim bin/containerd-shim-step05-v2 run --rm demo -- true
  shimctl events --json | jq .topic`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.driver()
			if err != nil {
				return err
			}
			if driver.Listening(d.TTRPCAddress) {
				return fmt.Errorf("another shimctl events serves %s already", d.TTRPCAddress)
			}
			srv, err := driver.ListenEvents(d.TTRPCAddress)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(cmd.ErrOrStderr(), "note: serving events at %s until interrupted\n", d.TTRPCAddress)
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			for n := 0; ; n++ {
				e, err := srv.Next(ctx, n)
				if err != nil {
					if ctx.Err() != nil {
						return nil // interrupted: the way this command ends
					}
					return fmt.Errorf("events: %w", err)
				}
				g.trace().Event(e)
				line, err := formatEvent(e, asJSON)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, line)
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event")
	return cmd
}

// formatEvent renders e as one line: "TIME NAMESPACE TOPIC k=v ...", or a JSON object.
func formatEvent(e driver.Event, asJSON bool) (string, error) {
	msg, _ := e.Event.(proto.Message)
	if asJSON {
		return eventJSON(e, msg)
	}
	var b strings.Builder
	b.WriteString(e.Timestamp.Local().Format(time.RFC3339Nano))
	b.WriteString(" " + e.Namespace + " " + e.Topic)
	switch {
	case msg != nil:
		if f := fields(msg.ProtoReflect()); f != "" {
			b.WriteString(" " + f)
		}
	case e.Event != nil:
		fmt.Fprintf(&b, " %v", e.Event)
	}
	return b.String(), nil
}

func eventJSON(e driver.Event, msg proto.Message) (string, error) {
	obj := struct {
		Timestamp time.Time       `json:"timestamp"`
		Namespace string          `json:"namespace"`
		Topic     string          `json:"topic"`
		Type      string          `json:"type,omitempty"`
		Event     json.RawMessage `json:"event,omitempty"`
	}{Timestamp: e.Timestamp, Namespace: e.Namespace, Topic: e.Topic}
	if msg != nil {
		obj.Type = string(msg.ProtoReflect().Descriptor().FullName())
		raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
		if err != nil {
			return "", fmt.Errorf("encode %s event: %w", e.Topic, err)
		}
		// protojson varies its spacing on purpose; one event must stay on one line.
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return "", fmt.Errorf("encode %s event: %w", e.Topic, err)
		}
		obj.Event = compact.Bytes()
	}
	line, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("encode %s event: %w", e.Topic, err)
	}
	return string(line), nil
}

// fields renders the set fields of m as "name=value" in declaration order. Numbers are shown
// even when zero, since exit_status=0 is news; empty strings, lists and unset messages are not.
func fields(m protoreflect.Message) string {
	var parts []string
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		v := m.Get(fd)
		var s string
		switch {
		case fd.IsList():
			if v.List().Len() == 0 {
				continue
			}
			items := make([]string, v.List().Len())
			for j := range items {
				items[j] = value(fd, v.List().Get(j))
			}
			s = "[" + strings.Join(items, " ") + "]"
		case fd.IsMap():
			if v.Map().Len() == 0 {
				continue
			}
			s = fmt.Sprintf("map[%d]", v.Map().Len())
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if !m.Has(fd) {
				continue
			}
			s = value(fd, v)
		case fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind || fd.Kind() == protoreflect.BoolKind:
			if !m.Has(fd) {
				continue
			}
			s = value(fd, v)
		default:
			s = value(fd, v)
		}
		parts = append(parts, fieldName(fd)+"="+s)
	}
	return strings.Join(parts, " ")
}

// fieldName shortens container_id, in every task event, to what ctr's users call it.
func fieldName(fd protoreflect.FieldDescriptor) string {
	if fd.Name() == "container_id" {
		return "container"
	}
	return string(fd.Name())
}

func value(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		m := v.Message()
		if ts, ok := m.Interface().(*timestamppb.Timestamp); ok {
			return ts.AsTime().Local().Format(time.RFC3339Nano)
		}
		return "{" + fields(m) + "}"
	case protoreflect.StringKind:
		s := v.String()
		if s == "" || strings.ContainsAny(s, " \t\n\"'{}[]=") {
			return strconv.Quote(s)
		}
		return s
	case protoreflect.BytesKind:
		return fmt.Sprintf("<%d bytes>", len(v.Bytes()))
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
	}
	return v.String()
}
