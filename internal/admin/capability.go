package admin

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/logging"
)

// DefaultAddr is the admin server's address by default: loopback only.
const DefaultAddr = "127.0.0.1:9090"

// Section is the admin console's configuration (ferry.Config's Admin).
type Section struct {
	// Addr is where the admin console (/admin/, /riverui/), /healthz,
	// /readyz and /metrics listen; "off" disables the admin server. An
	// address beyond loopback needs Token.
	Addr string `env:"FERRY_ADMIN_ADDR" flag:"admin-addr" usage:"address of the admin console (/admin/, /riverui/), /healthz, /readyz and /metrics, or off"`
	// Token protects all but /healthz and /readyz (which tells its reason
	// for not being ready only with the token).
	Token string `env:"FERRY_ADMIN_TOKEN" flag:"admin-token" secret:"true" usage:"token required on the admin surface (all but /healthz, and /readyz without its reason)"`
}

// WithDefaults returns sec with every unset field at its default.
func (sec Section) WithDefaults() Section {
	sec.Addr = cmp.Or(sec.Addr, DefaultAddr)
	return sec
}

// Check returns what is wrong with a defaulted sec.
func (sec Section) Check() error {
	if sec.Addr == "off" {
		return nil
	}
	return ValidateAddr(sec.Addr, sec.Token)
}

// Capability is the admin console (capability.Build): the admin server
// with River UI, around River (it answers before the worker fetches and
// until it has stopped).
type Capability struct {
	sec Section
	src Sources

	server *Server
	ui     *riverui.Handler

	mu     sync.Mutex
	cancel context.CancelFunc
}

// NewCapability returns the capability of sec (checked by the server's
// configuration, Section.Check): its pages read the server's database and
// src.
func NewCapability(sec Section, src Sources) *Capability {
	return &Capability{sec: sec, src: src}
}

// Name is "admin".
func (*Capability) Name() string { return "admin" }

// Addr is the admin server's bound address ("" when disabled); read it
// once the server has started.
func (c *Capability) Addr() string {
	if c.server == nil {
		return ""
	}
	return c.server.Addr()
}

// Build records the admin server as the first service around River; it is
// made once the River client exists (River UI reads it), before anything
// starts, when every capability has built: its pages are ferry's and the
// capabilities' (Build.Page).
func (c *Capability) Build(b *capability.Build) error {
	if c.sec.Addr == "off" {
		return nil
	}
	b.OnRiver(func(rc *river.Client[pgx.Tx]) error {
		var err error
		c.ui, err = riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(rc, nil),
			Logger:    logging.River(b.Logger),
			Prefix:    "/riverui",
		})
		if err != nil {
			return fmt.Errorf("ferry: new river ui handler: %w", err)
		}
		c.server, err = New(Config{
			Addr:     c.sec.Addr,
			Token:    c.sec.Token,
			Replica:  b.ClientID,
			Gatherer: b.Gatherer,
			Ready:    c.src.Ready,
			Console:  data{src: c.src, pool: b.Pool, replica: b.ClientID, river: b.River},
			Events:   c.src.Events(),
			Pages:    b.Pages(),
			RiverUI:  c.ui,
			Logger:   b.Logger,
		})
		return err
	})
	b.Around(c)
	return nil
}

// Start starts River UI's background services and the admin server.
func (c *Capability) Start(ctx context.Context) error {
	uiCtx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	if err := c.ui.Start(uiCtx); err != nil {
		cancel()
		return fmt.Errorf("ferry: start river ui: %w", err)
	}
	if err := c.server.Start(ctx); err != nil {
		cancel()
		return err
	}
	return nil
}

// Stop stops the admin server, then River UI's services.
func (c *Capability) Stop() {
	c.server.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}
