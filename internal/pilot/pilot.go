// Package pilot is ferry's River pilot: River's standard pilot, with the
// parts that ferry's capabilities decide for themselves (the job cleaner's
// delete, which the workflows make spare running workflows' steps; the
// fetch, which priority aging orders; the claim of jobs parked behind
// limits, which the limits make before the fetch).
//
// River plugs a pilot in through its driver (an interface River keeps
// unexported, PluginInit and PluginPilot, River Pro's way in), and takes
// one: so there is one pilot, and each capability sets its own part of it
// (a part set twice is an error at build). The pilot interface is River's
// internal API: a River upgrade that changes it fails to compile here, and
// the tests of each part fail when River's own query or parameters change
// (TestFetch_RiverQueryUnchanged in package queuecap,
// TestPilot_RiverDeleteParamsUnchanged in package workflowcap), so that no
// part silently drifts from River's.
package pilot

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
)

// DeleteBefore is the job cleaner's delete (riverpilot.PilotJobDeleter).
type DeleteBefore func(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobDeleteBeforeParams) (int, error)

// GetAvailable is the producers' fetch (riverpilot.Pilot's
// JobGetAvailable).
type GetAvailable func(ctx context.Context, exec riverdriver.Executor, state riverpilot.ProducerState, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error)

// Claim takes, before the fetch, up to params.MaxToLock jobs that River's
// fetch does not see (parked behind limits), claimed as River's fetch
// claims (running, attempt counted, attempted_by).
type Claim func(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobGetAvailableParams) ([]*rivertype.JobRow, error)

// ClaimSet is the SET list of River's claim of a fetched job (riverpgxv5's
// JobGetAvailable): running, its attempt counted and timed (at now, a SQL
// expression), the claiming client (client, a text parameter) appended to
// attempted_by, which keeps the last maxAttemptedBy (an integer
// parameter). A fetch of ferry's claims what River's would, as River's
// would.
func ClaimSet(now, client, maxAttemptedBy string) string {
	return `state = 'running',
        attempt = river_job.attempt + 1,
        attempted_at = ` + now + `,
        attempted_by = array_append(
            CASE WHEN array_length(river_job.attempted_by, 1) >= ` + maxAttemptedBy + `::int
            THEN river_job.attempted_by[array_length(river_job.attempted_by, 1) + 2 - ` + maxAttemptedBy + `::int:]
            ELSE river_job.attempted_by
            END,
            ` + client + `::text
        )`
}

// Pilot is River's standard pilot with the parts set on it.
type Pilot struct {
	riverpilot.StandardPilot
	deleteBefore DeleteBefore
	getAvailable GetAvailable
	claim        Claim
}

var _ riverpilot.PilotJobDeleter = (*Pilot)(nil)

// SetDeleteBefore sets the job cleaner's delete.
func (p *Pilot) SetDeleteBefore(fn DeleteBefore) error {
	if p.deleteBefore != nil {
		return errors.New("pilot: the job cleaner's delete is set twice")
	}
	p.deleteBefore = fn
	return nil
}

// SetGetAvailable sets the fetch.
func (p *Pilot) SetGetAvailable(fn GetAvailable) error {
	if p.getAvailable != nil {
		return errors.New("pilot: the fetch is set twice")
	}
	p.getAvailable = fn
	return nil
}

// SetClaim sets the claim made before the fetch.
func (p *Pilot) SetClaim(fn Claim) error {
	if p.claim != nil {
		return errors.New("pilot: the claim before the fetch is set twice")
	}
	p.claim = fn
	return nil
}

// Set reports whether any part is set: without one, River's client needs
// no pilot of ferry's.
func (p *Pilot) Set() bool { return p.deleteBefore != nil || p.getAvailable != nil || p.claim != nil }

// JobDeleteBefore is the part set, or River's.
func (p *Pilot) JobDeleteBefore(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobDeleteBeforeParams) (int, error) {
	if p.deleteBefore != nil {
		return p.deleteBefore(ctx, exec, params)
	}
	return p.StandardPilot.JobDeleteBefore(ctx, exec, params)
}

// JobGetAvailable is the claim set, then the fetch set or River's for the
// rest. Like River's, it locks nothing when asked for none.
func (p *Pilot) JobGetAvailable(ctx context.Context, exec riverdriver.Executor, state riverpilot.ProducerState, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	var claimed []*rivertype.JobRow
	if p.claim != nil && params.MaxToLock > 0 {
		var err error
		if claimed, err = p.claim(ctx, exec, params); err != nil {
			return nil, err
		}
		if len(claimed) > 0 {
			rest := *params
			rest.MaxToLock -= len(claimed)
			params = &rest
		}
	}
	var res *riverdriver.JobGetAvailableResult
	var err error
	switch {
	case params.MaxToLock <= 0:
		res = &riverdriver.JobGetAvailableResult{}
	case p.getAvailable != nil:
		res, err = p.getAvailable(ctx, exec, state, params)
	default:
		res, err = p.StandardPilot.JobGetAvailable(ctx, exec, state, params)
	}
	if err != nil {
		if len(claimed) == 0 {
			return nil, err
		}
		// The claimed jobs are running in this worker's name: River works
		// them, and its next fetch meets the error again.
		res = &riverdriver.JobGetAvailableResult{}
	}
	res.Jobs = append(claimed, res.Jobs...)
	return res, nil
}

// Driver is a River driver that gives River a pilot.
type Driver struct {
	riverdriver.Driver[pgx.Tx]
	pilot *Pilot
}

// NewDriver wraps d to give River p.
func NewDriver(d riverdriver.Driver[pgx.Tx], p *Pilot) *Driver { return &Driver{Driver: d, pilot: p} }

// PluginInit implements River's driver plugin.
func (d *Driver) PluginInit(*baseservice.Archetype) {}

// PluginPilot implements River's driver plugin.
func (d *Driver) PluginPilot() riverpilot.Pilot { return d.pilot }
