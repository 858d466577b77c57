package seal

import (
	"context"
	"fmt"
)

// Arm makes the database claim the run ids of the sealed jobs written to
// river_job (migration 014's INSERT trigger), if it does not already, and
// says whether it did. Every worker with keys calls it at start
// (ferry.Server.Run), so that a deployment without seals has no such
// trigger. Putting it on waits for the transactions writing river_job
// (LOCK TABLE … IN SHARE ROW EXCLUSIVE MODE, held for the moment it takes)
// and claims, oldest first, the sealed jobs written while there was none,
// marking any later copy of one of them. Once on, it stays.
func Arm(ctx context.Context, db DB) (bool, error) {
	var armed bool
	if err := db.QueryRow(ctx, `SELECT ferry_seal_arm()`).Scan(&armed); err != nil {
		return false, fmt.Errorf("ferry: seal: put the claim trigger on river_job: %w", err)
	}
	return armed, nil
}
