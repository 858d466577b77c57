package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/outbox"
)

// Update is the small view of an update a command handler needs, decoded
// leniently from a message or an edited message (ParseUpdate). Fields that
// are absent or of an unexpected type are left zero.
type Update struct {
	UpdateID int64
	ChatID   int64
	FromID   int64
	Username string
	Text     string
	// Edited is true when the update is an edited_message.
	Edited bool
	// Raw is the whole update as stored.
	Raw json.RawMessage
}

// ParseUpdate decodes u's view from raw, one field at a time so that no
// field of an unexpected type fails the others. It fails only when raw is
// not a JSON object.
func ParseUpdate(raw json.RawMessage) (Update, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return Update{}, errors.New("telegram: the update is not a JSON object")
	}
	u := Update{Raw: raw}
	lenient(top["update_id"], &u.UpdateID)
	msgRaw, ok := top["message"]
	if !ok || string(msgRaw) == "null" {
		if msgRaw, ok = top["edited_message"]; ok {
			u.Edited = true
		}
	}
	var msg map[string]json.RawMessage
	if !ok || json.Unmarshal(msgRaw, &msg) != nil {
		return u, nil
	}
	lenient(msg["text"], &u.Text)
	var chat, from map[string]json.RawMessage
	if json.Unmarshal(msg["chat"], &chat) == nil {
		lenient(chat["id"], &u.ChatID)
	}
	if json.Unmarshal(msg["from"], &from) == nil {
		lenient(from["id"], &u.FromID)
		lenient(from["username"], &u.Username)
	}
	return u, nil
}

// lenient decodes raw into v when it can, and leaves v alone otherwise.
func lenient[T any](raw json.RawMessage, v *T) {
	var x T
	if len(raw) > 0 && json.Unmarshal(raw, &x) == nil {
		*v = x
	}
}

// CommandFunc handles one command. It runs inside tx, the delivery's
// transaction (see outbox.Handler): its database effect happens once. args
// are the words after the command. A non-empty reply is sent to the chat
// by a telegram.send job, queued in tx (see Router.Route).
type CommandFunc func(ctx context.Context, tx pgx.Tx, u Update, args []string) (reply string, err error)

var commandRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// Router dispatches a bot's updates to command handlers: "/start",
// "/help arg1 arg2", "/cmd@BotName args". Register commands before the
// route is used; a Router is then read-only and safe for concurrent use.
//
// Commands are matched case-insensitively. A command addressed to another
// bot ("/start@OtherBot", in a group) is ignored when BotUsername is set.
// An unknown command goes to the Fallback handler if any, else is ignored;
// text that is not a command goes to the text handler (HandleText) if any,
// else is ignored. Without a handler of its own, /help answers with the
// list of commands.
type Router struct {
	// BotUsername is the bot's @username (without the @); when set,
	// commands addressed to another bot are ignored.
	BotUsername string

	commands map[string]CommandFunc
	fallback CommandFunc
	text     CommandFunc
}

// NewRouter returns an empty router.
func NewRouter() *Router { return &Router{commands: map[string]CommandFunc{}} }

// Handle registers fn for command ("/start" or "start": 1 to 32 of a-z, 0-9
// and _). An invalid or duplicate command panics: it is a wiring mistake.
func (r *Router) Handle(command string, fn CommandFunc) {
	name := strings.ToLower(strings.TrimPrefix(command, "/"))
	if !commandRE.MatchString(name) {
		panic(fmt.Sprintf("telegram: Router.Handle: command %q: 1 to 32 of a-z, 0-9 and _", command))
	}
	if fn == nil {
		panic(fmt.Sprintf("telegram: Router.Handle: command %q: nil handler", command))
	}
	if r.commands == nil {
		r.commands = map[string]CommandFunc{}
	}
	if _, dup := r.commands[name]; dup {
		panic(fmt.Sprintf("telegram: Router.Handle: command %q registered twice", command))
	}
	r.commands[name] = fn
}

// Fallback registers the handler of commands no Handle matched; args are
// the words after the command, and u.Text says which command it was.
func (r *Router) Fallback(fn CommandFunc) { r.fallback = fn }

// HandleText registers the handler of text that is not a command; args are
// the text's words.
func (r *Router) HandleText(fn CommandFunc) { r.text = fn }

// Commands lists the registered commands, sorted, with their slash.
func (r *Router) Commands() []string {
	out := make([]string, 0, len(r.commands))
	for name := range r.commands {
		out = append(out, "/"+name)
	}
	slices.Sort(out)
	return out
}

// ParseCommand splits text into a command and its arguments: "/Echo@Bot a b"
// is ("echo", "Bot", ["a", "b"]). ok is false when text is not a command.
func ParseCommand(text string) (command, botName string, args []string, ok bool) {
	if !strings.HasPrefix(text, "/") {
		return "", "", nil, false
	}
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return "", "", nil, false
	}
	head := strings.TrimPrefix(fields[0], "/")
	command, botName, _ = strings.Cut(head, "@")
	command = strings.ToLower(command)
	if !commandRE.MatchString(command) {
		return "", "", nil, false
	}
	return command, botName, fields[1:], true
}

// dispatch picks the handler of u; nil when none applies.
func (r *Router) dispatch(u Update) (CommandFunc, []string) {
	command, botName, args, ok := ParseCommand(u.Text)
	if !ok {
		if r.text != nil && strings.TrimSpace(u.Text) != "" {
			return r.text, strings.Fields(u.Text)
		}
		return nil, nil
	}
	if botName != "" && r.BotUsername != "" && !strings.EqualFold(botName, strings.TrimPrefix(r.BotUsername, "@")) {
		return nil, nil
	}
	if fn := r.commands[command]; fn != nil {
		return fn, args
	}
	if command == "help" {
		return r.defaultHelp, args
	}
	return r.fallback, args
}

func (r *Router) defaultHelp(context.Context, pgx.Tx, Update, []string) (string, error) {
	cmds := r.Commands()
	if len(cmds) == 0 {
		return "No commands.", nil
	}
	return "Commands:\n" + strings.Join(cmds, "\n"), nil
}

// Dispatch runs the handler of u, if any, in tx and returns its reply; it
// sends and queues nothing. Route's handler calls it.
func (r *Router) Dispatch(ctx context.Context, tx pgx.Tx, u Update) (string, error) {
	fn, args := r.dispatch(u)
	if fn == nil {
		return "", nil
	}
	return fn(ctx, tx, u, args)
}

// Route returns the outbox route that delivers bot's updates (topic
// telegram.<bot>) to this router under routeName (the consumer name in
// ferry_outbox_received; keep it stable). Its handler decodes the update,
// dispatches it, and queues a non-empty reply to the update's chat as a
// telegram.send job (SendArgs), inserted in the delivery's transaction:
// the reply exists if and only if the handler's effect commits, and no
// network call is made while the transaction holds its connection. A
// SendWorker sends it afterwards. client (required) is the bot's, whose
// token is scrubbed from the handler's errors.
//
// The handler inserts with the River client of its work context (the
// outbox.deliver job's), so the route works only inside a River worker,
// which is where the outbox delivers. The reply is queued once: the
// handler runs once per update (outbox.Receive), and a reply job is unique
// by bot and update_id besides. Sending is then at least once (see
// SendWorker).
//
// Errors never carry the token: the handler's are scrubbed.
func (r *Router) Route(bot, routeName string, client *Client) outbox.Route {
	if client == nil {
		panic("telegram: Router.Route: client is nil")
	}
	return outbox.Route{
		Topic: Topic(bot),
		Name:  routeName,
		Handler: func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
			u, err := ParseUpdate(msg.Payload)
			if err != nil {
				// Retrying cannot make it an object.
				return river.JobCancel(err)
			}
			reply, err := r.Dispatch(ctx, tx, u)
			if err != nil {
				return redactHandlerErr(client, err)
			}
			if reply == "" || u.ChatID == 0 {
				return nil
			}
			return queueReply(ctx, tx, SendArgs{Bot: bot, ChatID: u.ChatID, Text: reply, UpdateID: u.UpdateID})
		},
	}
}

// queueReply inserts a telegram.send job in tx, with the River client of
// ctx (a worker's), unique by bot and update when the update has an id.
func queueReply(ctx context.Context, tx pgx.Tx, args SendArgs) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("telegram: queue the reply to update %d: %w (a Router's route runs in an outbox.deliver job)", args.UpdateID, err)
	}
	var opts *river.InsertOpts
	if args.UpdateID != 0 {
		opts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	}
	if _, err := client.InsertTx(ctx, tx, args, opts); err != nil {
		return fmt.Errorf("telegram: queue the reply to update %d: %w", args.UpdateID, err)
	}
	return nil
}

// redactHandlerErr scrubs the token from a handler's error, keeping a
// cancel (river.JobCancel) a cancel.
func redactHandlerErr(client *Client, err error) error {
	var cancelErr *rivertype.JobCancelError
	if errors.As(err, &cancelErr) {
		inner := cancelErr.Unwrap()
		if inner == nil {
			return err
		}
		if clean := client.redactErr(inner); clean != inner {
			return river.JobCancel(clean)
		}
		return err
	}
	return client.redactErr(err)
}
