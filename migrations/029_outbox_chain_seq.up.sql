-- An ordered chain's order is the order its messages were relayed in, not
-- their ids (package outbox, "Ordered delivery"). Two writers of one key
-- whose transactions overlap may commit out of id order: a message with a
-- lower id that commits after a later one was relayed (and started, or
-- delivered) goes after it in its chain, never beside it.
--
-- chain_seq is a keyed message's place in its chain, set when the relay
-- relays it, under the chain's lock: one value of the ids' sequence per
-- relay transaction (so higher than any id or place taken before), ties
-- broken by id, so that a batch keeps its id order. NULL while the
-- message is pending, and for messages without an ordering key. Messages
-- relayed before this migration keep their id as their place.
ALTER TABLE ferry_outbox ADD COLUMN chain_seq bigint;
UPDATE ferry_outbox SET chain_seq = id WHERE ordering_key IS NOT NULL AND status <> 'pending';

-- A chain's links in order: the look-ups of a delivery's predecessor and
-- successor.
CREATE INDEX ferry_outbox_chain ON ferry_outbox (topic, ordering_key, chain_seq, id) WHERE chain_seq IS NOT NULL;

-- A key's messages not relayed yet: the relay relays a keyed message only
-- when none of its key with a lower id is pending (another relay holds
-- it), so that one writer's messages keep their order.
CREATE INDEX ferry_outbox_ordering_pending ON ferry_outbox (topic, ordering_key, id) WHERE ordering_key IS NOT NULL AND status = 'pending';

-- A relay of an older version (a rolling deploy) marks keyed messages
-- relayed without a place: this gives them one, one value for the
-- transaction as the relay's own, so that their deliveries are links of
-- their chains and never wait unseen. The relay sets chain_seq itself,
-- and the trigger does not fire for it.
CREATE FUNCTION ferry_outbox_chain_place() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v text := nullif(current_setting('ferry.outbox_chain_seq', true), '');
BEGIN
    IF v IS NULL THEN
        v := nextval(pg_get_serial_sequence(quote_ident(TG_TABLE_SCHEMA) || '.ferry_outbox', 'id'))::text;
        PERFORM set_config('ferry.outbox_chain_seq', v, true);
    END IF;
    NEW.chain_seq := v::bigint;
    RETURN NEW;
END;
$$;

CREATE TRIGGER ferry_outbox_chain_place BEFORE UPDATE ON ferry_outbox
    FOR EACH ROW WHEN (NEW.status = 'relayed' AND NEW.chain_seq IS NULL AND NEW.ordering_key IS NOT NULL)
    EXECUTE FUNCTION ferry_outbox_chain_place();
