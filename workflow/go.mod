module github.com/ferryq/ferry/workflow

go 1.26.8

// ferry's modules, from this repository: replace directives count only
// here, in the repository (a service gets tagged versions), so each of
// ferry's modules builds and tests on its own.
replace (
	github.com/ferryq/ferry/internal/base => ../internal/base
	github.com/ferryq/ferry/jobs => ../jobs
	github.com/ferryq/ferry/migrations => ../migrations
	github.com/ferryq/ferry/seal => ../seal
)

require (
	github.com/ferryq/ferry/internal/base v0.0.0-00010101000000-000000000000
	github.com/ferryq/ferry/jobs v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.12.0
	github.com/riverqueue/river v0.51.2
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.51.2
	github.com/riverqueue/river/rivertype v0.51.2
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/ferryq/ferry/migrations v0.0.0-00010101000000-000000000000 // indirect
	github.com/ferryq/ferry/seal v0.0.0-00010101000000-000000000000 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/riverqueue/river/riverdriver v0.51.2 // indirect
	github.com/riverqueue/river/rivershared v0.51.2 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.2 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
