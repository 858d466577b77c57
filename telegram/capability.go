package telegram

import (
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/outbox"
)

// Bot is one bot of the config file's `telegram:` section, its token read
// from the environment.
type Bot struct {
	Name string
	// TokenEnv names the variable the token is read from; Token is its
	// value ("" when unset: the bot is off).
	TokenEnv       string
	Token          string
	AllowedUpdates []string
	PollTimeout    time.Duration
}

// Section is the Telegram capability's configuration (ferry.Config's
// Telegram); the bots themselves are the config file's.
type Section struct {
	// APIURL is the Bot API server; default the public one. Tests and
	// air-gapped setups point elsewhere.
	APIURL string `env:"FERRY_TELEGRAM_API_URL" flag:"telegram-api-url" usage:"Telegram Bot API server (default the public one); tests and air-gapped setups point elsewhere"`
	// Routers are Go command routers by bot name: each becomes an outbox
	// route (telegram-<bot>-commands) on the bot's topic, and answers
	// through the bot's client.
	Routers map[string]*Router
}

// Check returns what is wrong with sec.
func (sec Section) Check() error {
	if sec.APIURL == "" {
		return nil
	}
	if u, err := url.Parse(sec.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("telegram API URL %q: not an absolute http(s) URL", redact.URL(sec.APIURL))
	}
	return nil
}

// Capability is a ferry server's Telegram bots (capability.Build): a
// long-poll of each bot's updates on the leader, the telegram.send job
// kind that sends what command routers answer, and each bot's metrics and
// status. Its routers' routes are the outbox capability's to deliver
// (Routes).
type Capability struct {
	sec     Section
	bots    []Bot
	clients map[string]*Client // the bots whose token is set
	routes  []outbox.Route
	logger  *slog.Logger
	status  []func() BotStatus
}

// NewCapability returns the capability of sec (checked by the server's
// configuration, Section.Check) and bots, the config file's. A bot whose token variable is unset stays off and
// says so on logger, and nothing else changes; a router for a bot the
// config file does not name is an error.
func NewCapability(sec Section, bots []Bot, logger *slog.Logger) (*Capability, error) {
	c := &Capability{sec: sec, bots: bots, clients: map[string]*Client{}, logger: logger}
	for _, b := range bots {
		if b.Token == "" {
			logger.Warn("telegram: bot off: its token variable is unset", "bot", b.Name, "token_env", b.TokenEnv)
			continue
		}
		c.clients[b.Name] = NewClient(sec.APIURL, b.Token, nil)
	}
	for _, bot := range slices.Sorted(maps.Keys(sec.Routers)) {
		client, ok := c.clients[bot]
		if !ok {
			if slices.ContainsFunc(bots, func(b Bot) bool { return b.Name == bot }) {
				continue // configured but off
			}
			return nil, fmt.Errorf("telegram: a command router is registered for bot %q, which the config file does not name", bot)
		}
		c.routes = append(c.routes, sec.Routers[bot].Route(bot, "telegram-"+bot+"-commands", client))
	}
	return c, nil
}

// Name is "telegram".
func (*Capability) Name() string { return "telegram" }

// Routes are the outbox routes of the command routers of the bots that
// are on.
func (c *Capability) Routes() []outbox.Route { return slices.Clone(c.routes) }

// Status is a snapshot of every configured bot (polling, standby, backing
// off, or off), once built.
func (c *Capability) Status() []BotStatus {
	out := make([]BotStatus, 0, len(c.status))
	for _, st := range c.status {
		out = append(out, st())
	}
	return out
}

// Build records the telegram.send kind (command routers' replies, which
// the bots' clients send outside any transaction), and for each bot its
// poller as the leader runnable "telegram.<bot>", or, for a bot that is
// off, its metrics at zero.
func (c *Capability) Build(b *capability.Build) error {
	if err := b.Kinds.Add(NewSendWorker(c.clients, c.logger).Kind()); err != nil {
		return err
	}
	for _, bot := range c.bots {
		client, ok := c.clients[bot.Name]
		if !ok {
			if err := b.Metrics.Register(OffCollector(bot.Name)); err != nil {
				return err
			}
			c.status = append(c.status, func() BotStatus { return OffStatus(bot.Name) })
			continue
		}
		p, err := NewPoller(PollerConfig{
			Bot: bot.Name, Client: client, Pool: b.Pool, Leader: b.Elector,
			PollTimeout: bot.PollTimeout, AllowedUpdates: bot.AllowedUpdates,
			Logger: b.Logger, Registerer: b.Metrics,
		})
		if err != nil {
			return capability.Invalid(err)
		}
		c.status = append(c.status, p.Status)
		b.Leader("telegram."+bot.Name, p.Run)
	}
	return nil
}
