package deploy

import (
	"testing"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
