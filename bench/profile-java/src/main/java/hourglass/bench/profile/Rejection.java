package hourglass.bench.profile;

/**
 * Why a line or one of its tags is not written: one of hourglass's dead-letter kinds
 * ({@code Reason::KINDS}, jobs/profile/src/event.rs). Thrown by the decoder and the value
 * check, never out of the peer; shared instances without a stack trace, as they are counted,
 * not shown.
 */
final class Rejection extends Exception {
    private static final long serialVersionUID = 1L;

    /** The kinds, in hourglass's order: the index of each is its counter's. */
    static final String[] KINDS = {
        "too_long", "not_utf8", "invalid_json", "not_an_object", "missing_field", "bad_field",
        "too_many_tags", "unknown_tag", "offline_tag", "gray_tag", "wrong_type", "value_too_large",
        "future",
    };

    static final Rejection TOO_LONG = new Rejection(0);
    static final Rejection NOT_UTF8 = new Rejection(1);
    static final Rejection INVALID_JSON = new Rejection(2);
    static final Rejection NOT_AN_OBJECT = new Rejection(3);
    static final Rejection MISSING_FIELD = new Rejection(4);
    static final Rejection BAD_FIELD = new Rejection(5);
    static final Rejection TOO_MANY_TAGS = new Rejection(6);
    static final Rejection UNKNOWN_TAG = new Rejection(7);
    static final Rejection OFFLINE_TAG = new Rejection(8);
    static final Rejection GRAY_TAG = new Rejection(9);
    static final Rejection WRONG_TYPE = new Rejection(10);
    static final Rejection TOO_LARGE = new Rejection(11);
    static final Rejection FUTURE = new Rejection(12);

    final int kind;

    private Rejection(int kind) {
        super(KINDS[kind], null, false, false);
        this.kind = kind;
    }
}
