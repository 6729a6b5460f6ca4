//! The profile tables' row keys, their one codec: user ids, the MD5 salt, profile and history
//! rows, their prefixes and parsing.
//!
//! - `user_profile_tag`: `<salt><user>`, the salt being the first [`SALT_LEN`] lowercase hex
//!   digits of MD5(user id), with no separator: the salt has a fixed length, so the user id
//!   starts at byte 4.
//! - `user_tag_history`: `<salt>_<user>_<tag code>_<reversed ts>`, the reversed timestamp being
//!   `i64::MAX - ts_ms` in [`REVERSED_TS_DIGITS`] zero-padded decimal digits (Java:
//!   `String.format("%019d", Long.MAX_VALUE - ts)`), so that a tag's newest change sorts first.
//!
//! Why a hash salt: user ids are sequential numbers or phone numbers that share their leading
//! digits, so keyed by the plain id every new user, and every hot range of ids, lands in one
//! region. MD5 spreads them evenly over the salt space, and is what the seed's Java consumer
//! (`MessageDigest.getInstance("MD5")`) and any HBase shell user can compute, so the keys are
//! the same byte for byte. A Get of one user's profile computes the salt from the id: salting
//! costs reads nothing, unlike a scan by id range, which the profile store never needs.

use sinks::schema::KeyCodec;

/// Length of the salt: 4 lowercase hex digits, 65,536 buckets, enough to spread any realistic
/// number of regions evenly.
pub const SALT_LEN: usize = 4;
/// Digits of a reversed timestamp in a history row key: every `i64` from 0 up fits in 19.
pub const REVERSED_TS_DIGITS: usize = 19;
/// Longest user id, in bytes (as the sensor job's device ids).
pub const MAX_USER_ID_LEN: usize = 64;
/// The byte between the parts of a history row key. User ids never contain it.
pub const SEPARATOR: u8 = b'_';

/// `user_profile_tag`'s key codec for its table spec: a user's row is [`profile_row`].
pub const PROFILE_KEY_CODEC: KeyCodec = KeyCodec::new("<md5 hex:4><user>", profile_row);
/// `user_tag_history`'s key codec for its table spec: a user's rows under
/// [`user_history_prefix`].
pub const HISTORY_KEY_CODEC: KeyCodec = KeyCodec::new(
    "<md5 hex:4>_<user>_<tag code>_<Long.MAX - ts_ms:19>",
    user_history_prefix,
);

/// Why a user id is refused: what is wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadUserId(pub String);

/// Checks a user id as text: 1 to [`MAX_USER_ID_LEN`] bytes of `A-Z a-z 0-9 . : -`, the rules
/// of the sensor job's device ids.
///
/// `_` separates the parts of a history row key (and `:` is no problem in the Redis key
/// `short-tags:{user}`, nor in the old layout's `short:{user}:{code}`, whose code has none), and the row-key prefix of a user's history,
/// `<salt>_<user>_`, must hold no other user's rows: with `_` allowed, user `a` would see the
/// history of a user `a_b`. Control characters, spaces and non-ASCII text are refused too, so
/// that a key prints as itself in the HBase shell and in logs.
///
/// # Errors
///
/// [`BadUserId`] saying what is wrong.
pub fn validate_user_id(user: &str) -> Result<(), BadUserId> {
    if user.is_empty() || user.len() > MAX_USER_ID_LEN {
        return Err(BadUserId(format!(
            "user id must be 1-{MAX_USER_ID_LEN} bytes, got {} bytes",
            user.len()
        )));
    }
    if let Some(c) = user
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-')))
    {
        return Err(BadUserId(format!(
            "user id {user:?} contains {c:?}; allowed are A-Z a-z 0-9 . : - ('_' separates \
             row-key parts)"
        )));
    }
    Ok(())
}

/// The salt of a user: the first [`SALT_LEN`] lowercase hex digits of MD5 of the id's bytes.
pub fn salt(user: &str) -> [u8; SALT_LEN] {
    let digest = md5(user.as_bytes());
    let mut out = [0u8; SALT_LEN];
    for (i, slot) in out.iter_mut().enumerate() {
        let byte = digest[i / 2];
        let nibble = if i % 2 == 0 { byte >> 4 } else { byte & 0x0f };
        *slot = b"0123456789abcdef"[usize::from(nibble)];
    }
    out
}

/// The row key of a user in `user_profile_tag`: the salt followed by the id.
pub fn profile_row(user: &str) -> Vec<u8> {
    profile_row_salted(&salt(user), user)
}

/// [`profile_row`] of a user whose salt (`salt(user)`) is known: a flush computes it once per
/// user for the profile row and every history row.
pub fn profile_row_salted(salt: &[u8; SALT_LEN], user: &str) -> Vec<u8> {
    let mut row = Vec::with_capacity(SALT_LEN + user.len());
    row.extend_from_slice(salt);
    row.extend_from_slice(user.as_bytes());
    row
}

/// The user id of a `user_profile_tag` row key, if the key is one (its salt matches its id).
pub fn parse_profile_row(row: &[u8]) -> Option<&str> {
    let user = std::str::from_utf8(row.get(SALT_LEN..)?).ok()?;
    (validate_user_id(user).is_ok() && salt(user) == row[..SALT_LEN]).then_some(user)
}

/// The prefix of every `user_tag_history` row of a user: `<salt>_<user>_`.
pub fn user_history_prefix(user: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(SALT_LEN + user.len() + 2);
    key.extend_from_slice(&salt(user));
    key.push(SEPARATOR);
    key.extend_from_slice(user.as_bytes());
    key.push(SEPARATOR);
    key
}

/// The prefix of the `user_tag_history` rows of one user's tag: `<salt>_<user>_<code>_`.
///
/// Tag codes may contain `_`, so this prefix also starts the rows of the user's codes that
/// extend `code` by `_…` (`beh_buy_` starts `beh_buy_30d_…`): a scan by it keeps only the rows
/// that [`parse_history_row`] reads back with this code.
pub fn tag_history_prefix(user: &str, code: &str) -> Vec<u8> {
    let mut key = user_history_prefix(user);
    key.extend_from_slice(code.as_bytes());
    key.push(SEPARATOR);
    key
}

/// The `user_tag_history` row of one change: `<salt>_<user>_<code>_<i64::MAX - ts_ms>`.
///
/// Reversed, so that a scan from [`tag_history_prefix`] meets the newest change first and
/// "the value at time T" is the first row at or after `history_row(user, code, T)`. A negative
/// `ts_ms` (never written: events are range-checked) is clamped to 0.
pub fn history_row(user: &str, code: &str, ts_ms: i64) -> Vec<u8> {
    history_row_salted(&salt(user), user, code, ts_ms)
}

/// [`history_row`] of a user whose salt (`salt(user)`) is known, built in one allocation of
/// its exact length.
pub fn history_row_salted(salt: &[u8; SALT_LEN], user: &str, code: &str, ts_ms: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(SALT_LEN + user.len() + code.len() + 3 + REVERSED_TS_DIGITS);
    key.extend_from_slice(salt);
    key.push(SEPARATOR);
    key.extend_from_slice(user.as_bytes());
    key.push(SEPARATOR);
    key.extend_from_slice(code.as_bytes());
    key.push(SEPARATOR);
    // `i64::MAX - ts_ms.max(0)` is never negative: its 19 digits, zero-padded.
    let mut reversed = (i64::MAX - ts_ms.max(0)).unsigned_abs();
    let mut digits = [b'0'; REVERSED_TS_DIGITS];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (reversed % 10) as u8;
        reversed /= 10;
    }
    key.extend_from_slice(&digits);
    key
}

/// The user, tag code and event time (ms) of a `user_tag_history` row key; `None` when the key
/// is not one. The reversed timestamp has a fixed width and user ids hold no `_`, so the parts
/// are found whatever `_` the code holds.
pub fn parse_history_row(row: &[u8]) -> Option<(&str, &str, i64)> {
    let text = std::str::from_utf8(row).ok()?;
    let split = text.len().checked_sub(REVERSED_TS_DIGITS + 1)?;
    let (head, ts) = (text.get(..split)?, text.get(split + 1..)?);
    if !text[split..].starts_with('_') || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ts_ms = i64::MAX - ts.parse::<i64>().ok()?;
    let rest = head.get(SALT_LEN + 1..)?;
    let (user, code) = rest.split_once('_')?;
    let ok = validate_user_id(user).is_ok()
        && crate::tag::validate_code(code).is_ok()
        && head.as_bytes()[..SALT_LEN] == salt(user)
        && head.as_bytes()[SALT_LEN] == SEPARATOR;
    ok.then_some((user, code, ts_ms))
}

/// Split keys cutting the salt space into `regions` ranges of equal size, on hex boundaries:
/// for 16, `1000`, `2000`, … `f000`. Both tables' keys start with the salt, and MD5 is
/// uniform, so each region gets about the same share of users. 0 and 1 give no split; more
/// than 65,536 regions are read as 65,536.
pub fn salt_split_keys(regions: u32) -> Vec<Vec<u8>> {
    let n = u64::from(regions.clamp(1, 1 << 16));
    (1..n)
        .map(|i| format!("{:04x}", i * (1 << 16) / n).into_bytes())
        .collect()
}

/// MD5 (RFC 1321) of `data`, through the RustCrypto `md-5` crate. Only for the salt: MD5 is
/// what HBase practice salts with (`MD5Hash` in HBase's own utilities), and its first bytes are
/// uniform.
pub fn md5(data: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_matches_rfc_1321_and_python() {
        // RFC 1321 appendix A.5, then ids whose digests Python's hashlib gave.
        let vectors: &[(&[u8], &str)] = &[
            (b"", "d41d8cd98f00b204e9800998ecf8427e"),
            (b"a", "0cc175b9c0f1b6a831c399e269772661"),
            (b"abc", "900150983cd24fb0d6963f7d28e17f72"),
            (b"message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                b"abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
            (b"10086", "6412121cbb2dc2cb9e460cfee7046be2"),
            (b"13800138000", "7945bd83237335e5376ff44d62e4f0ae"),
            ("用户".as_bytes(), "1fd02a90c38333badc226309fea6fecb"),
        ];
        for (input, want) in vectors {
            assert_eq!(
                hex(&md5(input)),
                *want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn profile_rows_are_salt_then_id() {
        assert_eq!(salt("10086"), *b"6412");
        assert_eq!(profile_row("10086"), b"641210086".to_vec());
        assert_eq!(profile_row("13800138000"), b"794513800138000".to_vec());
        assert_eq!(parse_profile_row(b"641210086"), Some("10086"));
        assert_eq!(parse_profile_row(b"000010086"), None, "wrong salt");
        assert_eq!(parse_profile_row(b"641"), None);
    }

    #[test]
    fn history_rows_round_trip_and_newest_sorts_first() {
        let row = history_row("10086", "beh_buy_30d", 1_796_500_000_000);
        assert_eq!(
            String::from_utf8(row.clone()).unwrap(),
            format!(
                "6412_10086_beh_buy_30d_{:019}",
                i64::MAX - 1_796_500_000_000
            )
        );
        assert_eq!(
            parse_history_row(&row),
            Some(("10086", "beh_buy_30d", 1_796_500_000_000))
        );
        assert!(row.starts_with(&tag_history_prefix("10086", "beh_buy_30d")));
        assert!(
            row.starts_with(&tag_history_prefix("10086", "beh_buy")),
            "see its doc"
        );
        assert_ne!(parse_history_row(&row).map(|p| p.1), Some("beh_buy"));
        let newer = history_row("10086", "beh_buy_30d", 1_796_500_001_000);
        assert!(newer < row, "the newer change sorts first");
        assert_eq!(
            parse_history_row(&history_row("u", "c", 0)),
            Some(("u", "c", 0))
        );
        for bad in [
            &b"6412_10086_c_12"[..],
            b"x",
            b"0000_10086_c_0000000000000000000",
        ] {
            assert_eq!(
                parse_history_row(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn reversed_stamps_are_nineteen_zero_padded_digits() {
        let mut stamps = vec![i64::MIN, -1, 0, 1, 999, i64::MAX - 1, i64::MAX];
        stamps.extend((0..19).map(|p| 10i64.pow(p)));
        stamps.extend((0..19).map(|p| 10i64.pow(p) - 1));
        for ts_ms in stamps {
            let want = format!("6412_10086_c_{:019}", i64::MAX - ts_ms.max(0));
            let row = history_row("10086", "c", ts_ms);
            assert_eq!(String::from_utf8(row.clone()).unwrap(), want, "{ts_ms}");
            assert_eq!(row.len(), row.capacity(), "one allocation of its length");
        }
        assert_eq!(
            profile_row_salted(&salt("10086"), "10086"),
            profile_row("10086")
        );
    }

    #[test]
    fn user_ids() {
        for ok in [
            "10086",
            "13800138000",
            "a.b:c-D9",
            &"9".repeat(MAX_USER_ID_LEN),
        ] {
            assert!(validate_user_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a_b",
            "a b",
            "dév",
            "a\n",
            &"9".repeat(MAX_USER_ID_LEN + 1),
        ] {
            assert!(validate_user_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn splits_cut_the_salt_space_evenly() {
        let keys = salt_split_keys(16);
        assert_eq!(keys.len(), 15);
        assert_eq!(keys[0], b"1000");
        assert_eq!(keys[14], b"f000");
        assert!(salt_split_keys(1).is_empty() && salt_split_keys(0).is_empty());
        assert_eq!(salt_split_keys(3), vec![b"5555".to_vec(), b"aaaa".to_vec()]);
        // Phone-number-like ids that share their leading digits still spread over every region.
        let mut per_region = [0u32; 16];
        for i in 0..16_000u64 {
            let row = profile_row(&format!("138{:08}", i));
            per_region[keys.partition_point(|k| k.as_slice() <= row.as_slice())] += 1;
        }
        assert!(
            per_region.iter().all(|&n| (800..1200).contains(&n)),
            "{per_region:?}"
        );
    }
}
