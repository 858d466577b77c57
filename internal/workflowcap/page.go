package workflowcap

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/workflow"
)

// pageTemplate lists the newest workflows with their state and progress.
const pageTemplate = `<h1>Workflows</h1>
{{with .Data}}
<table>
<thead><tr><th>id</th><th>name</th><th>state</th><th>progress</th><th>created</th><th>finished</th></tr></thead>
<tbody>
{{range .}}<tr data-workflow="{{.ID}}">
<td><a href="/admin/workflows/{{.ID}}"><code>{{.ID}}</code></a></td><td>{{.Name}}</td><td class="state-{{.State}}">{{.State}}</td>
<td>{{.Progress.Finished}}/{{.Progress.Steps}} ({{.Progress.Completed}} completed, {{.Progress.Failed}} failed, {{.Progress.Skipped}} skipped)</td>
<td>{{utc .CreatedAt}}</td><td>{{with .FinishedAt}}{{utc .}}{{end}}</td>
</tr>{{end}}
</tbody>
</table>
{{else}}<p>No workflow yet.</p>{{end}}`

// itemTemplate is one workflow: its DAG drawn in layers (each step in the
// column after its deepest dependency), steps coloured by state and
// linked to River UI's page of their job, then the steps' table.
const itemTemplate = `{{with .Data}}
<h1>Workflow <code>{{.Info.ID}}</code></h1>
<p>{{.Info.Name}}: <strong class="state-{{.Info.State}}">{{.Info.State}}</strong>,
{{.Info.Progress.Finished}}/{{.Info.Progress.Steps}} steps ended ({{.Info.Progress.Completed}} completed,
{{.Info.Progress.Failed}} failed, {{.Info.Progress.Skipped}} skipped); created {{utc .Info.CreatedAt}}{{with .Info.FinishedAt}}, ended {{utc .}}{{end}}.</p>
{{if .Drawn}}
<svg class="dag" data-steps="{{len .Nodes}}" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="the workflow's steps and their dependencies">
{{range .Edges}}<line x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}" stroke="#9aa0a6" stroke-width="1"/>
{{end}}{{range .Nodes}}<a href="{{.Link}}"><g data-step="{{.Name}}" data-state="{{.State}}">
<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" rx="4" fill="{{.Fill}}" stroke="#3c4043"/>
<text x="{{.TX}}" y="{{.TY}}" font-size="11" font-family="sans-serif">{{.Label}}</text>
<title>{{.Name}}: {{.State}}</title></g></a>
{{end}}</svg>
{{else}}<p>The DAG is drawn for workflows of at most {{.MaxDrawn}} steps; this one has {{len .Info.Steps}}.</p>{{end}}
<table>
<thead><tr><th>step</th><th>job</th><th>kind</th><th>state</th><th>attempts</th><th>depends on</th><th>started</th><th>ended</th><th>last error</th></tr></thead>
<tbody>
{{range .Info.Steps}}<tr data-step="{{.Name}}">
<td>{{.Name}}</td><td><a href="/riverui/jobs/{{.JobID}}">{{.JobID}}</a></td><td>{{.Kind}}</td>
<td class="state-{{.State}}">{{.State}}{{with .CancelReason}} ({{.}}){{end}}</td><td>{{.Attempt}}/{{.MaxAttempts}}</td>
<td>{{range $i, $d := .DependsOn}}{{if $i}}, {{end}}{{$d}}{{end}}</td>
<td>{{with .AttemptedAt}}{{utc .}}{{end}}</td><td>{{with .FinalizedAt}}{{utc .}}{{end}}</td><td>{{.Error}}</td>
</tr>{{end}}
</tbody>
</table>
{{end}}`

func page(pool *pgxpool.Pool) capability.Page {
	return capability.Page{
		Name:     "workflows",
		Title:    "Workflows",
		Template: pageTemplate,
		Data: func(ctx context.Context) (any, error) {
			list, err := workflow.List(ctx, pool, workflow.ListParams{Limit: 100})
			if list == nil {
				list = []workflow.Info{}
			}
			return list, err
		},
		ItemTemplate: itemTemplate,
		Item: func(ctx context.Context, id string) (any, error) {
			in, err := workflow.Get(ctx, pool, id)
			if errors.Is(err, workflow.ErrNotFound) {
				return nil, capability.ErrNoItem
			}
			if err != nil {
				return nil, err
			}
			return draw(in), nil
		},
	}
}
