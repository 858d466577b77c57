package locks

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotAcquired is returned (in a *HeldError naming the holder) when
	// the lock is held by someone else and the wait ran out.
	ErrNotAcquired = errors.New("locks: lock not acquired")
	// ErrUnavailable is returned when Postgres cannot be reached: nobody can
	// tell who holds the lock, so nobody acquires it.
	ErrUnavailable = errors.New("locks: Postgres unavailable")
	// ErrLost is the cause of a Lock's context after its lock was lost: a
	// renewal found a newer acquisition, or renewals failed until the
	// safety margin before expiry. Fence returns it (wrapped) for a token
	// that is no longer the current, unexpired one.
	ErrLost = errors.New("locks: lock lost")
	// ErrReleased is the cause of a Lock's context after Release.
	ErrReleased = errors.New("locks: lock released")
	// ErrInvalidName is returned for a name that is not 1 to 128 letters,
	// digits and _.:- (the database checks the same).
	ErrInvalidName = errors.New("locks: invalid lock name")
)

// Holder is a lock's current holder, as the database sees it.
type Holder struct {
	Name       string    `json:"name"`
	Token      int64     `json:"token"`
	Holder     string    `json:"holder"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// ExpiresIn is expires_at minus the database's clock when it was read:
	// a duration, comparable with this process's clock, unlike ExpiresAt.
	ExpiresIn time.Duration `json:"expires_in_ns"`
}

// HeldError is ErrNotAcquired with the holder that had the lock when the
// wait ran out.
type HeldError struct {
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("locks: %s is held by %s (token %d, expires in %s)",
		e.Holder.Name, e.Holder.Holder, e.Holder.Token, e.Holder.ExpiresIn.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrNotAcquired) true.
func (e *HeldError) Unwrap() error { return ErrNotAcquired }
