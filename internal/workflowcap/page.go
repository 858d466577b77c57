package workflowcap

import (
	"context"

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
<td><code>{{.ID}}</code></td><td>{{.Name}}</td><td class="state-{{.State}}">{{.State}}</td>
<td>{{.Progress.Finished}}/{{.Progress.Steps}} ({{.Progress.Completed}} completed, {{.Progress.Failed}} failed, {{.Progress.Skipped}} skipped)</td>
<td>{{utc .CreatedAt}}</td><td>{{with .FinishedAt}}{{utc .}}{{end}}</td>
</tr>{{end}}
</tbody>
</table>
{{else}}<p>No workflow yet.</p>{{end}}`

func page(pool *pgxpool.Pool) capability.Page {
	return capability.Page{
		Name:     "workflows",
		Title:    "Workflows",
		Template: pageTemplate,
		Data: func(ctx context.Context) (any, error) {
			return workflow.List(ctx, pool, workflow.ListParams{Limit: 100})
		},
	}
}
