// Package pilot is ferry's River pilot: River's standard pilot, with the
// parts that ferry's capabilities decide for themselves (the job cleaner's
// delete, which the workflows make spare running workflows' steps; the
// fetch, which priority aging orders).
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
)

// DeleteBefore is the job cleaner's delete (riverpilot.PilotJobDeleter).
type DeleteBefore func(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobDeleteBeforeParams) (int, error)

// GetAvailable is the producers' fetch (riverpilot.Pilot's
// JobGetAvailable).
type GetAvailable func(ctx context.Context, exec riverdriver.Executor, state riverpilot.ProducerState, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error)

// Pilot is River's standard pilot with the parts set on it.
type Pilot struct {
	riverpilot.StandardPilot
	deleteBefore DeleteBefore
	getAvailable GetAvailable
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

// Set reports whether any part is set: without one, River's client needs
// no pilot of ferry's.
func (p *Pilot) Set() bool { return p.deleteBefore != nil || p.getAvailable != nil }

// JobDeleteBefore is the part set, or River's.
func (p *Pilot) JobDeleteBefore(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobDeleteBeforeParams) (int, error) {
	if p.deleteBefore != nil {
		return p.deleteBefore(ctx, exec, params)
	}
	return p.StandardPilot.JobDeleteBefore(ctx, exec, params)
}

// JobGetAvailable is the part set, or River's. Like River's, it locks
// nothing when asked for none.
func (p *Pilot) JobGetAvailable(ctx context.Context, exec riverdriver.Executor, state riverpilot.ProducerState, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	if p.getAvailable != nil && params.MaxToLock > 0 {
		return p.getAvailable(ctx, exec, state, params)
	}
	return p.StandardPilot.JobGetAvailable(ctx, exec, state, params)
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
