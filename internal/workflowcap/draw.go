package workflowcap

import (
	"strconv"

	"github.com/ferryq/ferry/workflow"
)

// MaxDrawn is the most steps a workflow's page draws.
const MaxDrawn = 500

// Sizes of the drawing, in pixels.
const (
	nodeW, nodeH = 140, 26
	colW, rowH   = 180, 38
	margin       = 10
	labelMax     = 20 // characters of a step's name on its box
)

// stateFill colours a step by its job's state.
var stateFill = map[string]string{
	"pending":   "#e8eaed",
	"available": "#d2e3fc",
	"scheduled": "#d2e3fc",
	"retryable": "#fde293",
	"running":   "#aecbfa",
	"completed": "#ceead6",
	"cancelled": "#dadce0",
	"discarded": "#f6aea9",
	"deleted":   "#f6aea9",
}

// drawing is a workflow's page: its Info (what the JSON API returns too)
// and, for one of at most MaxDrawn steps, its DAG laid out in layers.
type drawing struct {
	Info     *workflow.Info `json:"workflow"`
	Drawn    bool           `json:"-"`
	MaxDrawn int            `json:"-"`
	Width    int            `json:"-"`
	Height   int            `json:"-"`
	Nodes    []node         `json:"-"`
	Edges    []edge         `json:"-"`
}

type node struct {
	Name, State, Fill, Label, Link string
	X, Y, W, H, TX, TY             int
}

type edge struct{ X1, Y1, X2, Y2 int }

// draw lays the steps out in columns by depth (a step one column after
// its deepest dependency), in the order of their job ids within a column.
func draw(in *workflow.Info) drawing {
	d := drawing{Info: in, MaxDrawn: MaxDrawn}
	if len(in.Steps) == 0 || len(in.Steps) > MaxDrawn {
		return d
	}
	d.Drawn = true
	at := make(map[string]int, len(in.Steps))
	for i, s := range in.Steps {
		at[s.Name] = i
	}
	depth := make([]int, len(in.Steps))
	// Steps come in job id order, a dependency before its dependents
	// except for steps added at run time: relax until nothing moves (at
	// most as many passes as the longest chain).
	for changed := true; changed; {
		changed = false
		for i, s := range in.Steps {
			for _, dep := range s.DependsOn {
				if j, ok := at[dep]; ok && depth[j]+1 > depth[i] {
					depth[i], changed = depth[j]+1, true
				}
			}
		}
	}
	rows := map[int]int{}
	pos := make([][2]int, len(in.Steps))
	for i, s := range in.Steps {
		x, y := margin+depth[i]*colW, margin+rows[depth[i]]*rowH
		rows[depth[i]]++
		pos[i] = [2]int{x, y}
		label := s.Name
		if r := []rune(label); len(r) > labelMax {
			label = string(r[:labelMax-1]) + "…"
		}
		fill := stateFill[s.State]
		if fill == "" {
			fill = "#ffffff"
		}
		d.Nodes = append(d.Nodes, node{Name: s.Name, State: s.State, Fill: fill, Label: label,
			Link: "/riverui/jobs/" + strconv.FormatInt(s.JobID, 10),
			X:    x, Y: y, W: nodeW, H: nodeH, TX: x + 6, TY: y + nodeH/2 + 4})
		d.Width = max(d.Width, x+nodeW+margin)
		d.Height = max(d.Height, y+nodeH+margin)
	}
	for i, s := range in.Steps {
		for _, dep := range s.DependsOn {
			if j, ok := at[dep]; ok {
				d.Edges = append(d.Edges, edge{X1: pos[j][0] + nodeW, Y1: pos[j][1] + nodeH/2, X2: pos[i][0], Y2: pos[i][1] + nodeH/2})
			}
		}
	}
	return d
}
