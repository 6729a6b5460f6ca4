//! Generated Thrift2 client for the calls Thrift1 lacks: table admin (split keys, descriptors)
//! and batched writes whose cells each carry their own timestamp (`putMultiple`).
//!
//! `hbase2.rs` is generated from `hbase2.thrift` (see the command in that file) and committed,
//! so building hourglass does not need the Thrift compiler.

#[allow(
    missing_docs,
    missing_debug_implementations,
    dead_code,
    rust_2018_idioms,
    clippy::all,
    clippy::pedantic
)]
#[rustfmt::skip]
mod hbase2;

pub(crate) use hbase2::*;

use thrift::protocol::{
    field_id, verify_expected_message_type, verify_expected_sequence_number,
    verify_expected_service_call, TFieldIdentifier, TListIdentifier, TMessageIdentifier,
    TMessageType, TSerializable, TStructIdentifier, TType,
};
use thrift::TThriftClient;

/// `putMultiple(table, tputs)` from a borrowed batch: the same bytes on the wire and the same
/// reply handling as the generated `put_multiple`, which takes the batch by value and so would
/// need a copy of every batch to be able to send it again after a retriable failure.
///
/// # Errors
/// As the generated call: a transport or protocol error, an application error from the
/// gateway, or the gateway's `TIOError` as [`thrift::Error::User`].
pub(crate) fn put_multiple_ref(
    client: &mut impl TThriftClient,
    table: &[u8],
    tputs: &[TPut],
) -> thrift::Result<()> {
    const CALL: &str = "putMultiple";
    client.increment_sequence_number();
    let seq = client.sequence_number();
    let o = client.o_prot_mut();
    o.write_message_begin(&TMessageIdentifier::new(CALL, TMessageType::Call, seq))?;
    o.write_struct_begin(&TStructIdentifier::new("putMultiple_args"))?;
    o.write_field_begin(&TFieldIdentifier::new("table", TType::String, 1))?;
    o.write_bytes(table)?;
    o.write_field_end()?;
    o.write_field_begin(&TFieldIdentifier::new("tputs", TType::List, 2))?;
    let len = i32::try_from(tputs.len()).map_err(|_| {
        thrift::Error::Protocol(thrift::ProtocolError::new(
            thrift::ProtocolErrorKind::SizeLimit,
            format!("{} puts do not fit one Thrift list", tputs.len()),
        ))
    })?;
    o.write_list_begin(&TListIdentifier::new(TType::Struct, len))?;
    for put in tputs {
        put.write_to_out_protocol(o)?;
    }
    o.write_list_end()?;
    o.write_field_end()?;
    o.write_field_stop()?;
    o.write_struct_end()?;
    o.write_message_end()?;
    o.flush()?;

    let i = client.i_prot_mut();
    let reply = i.read_message_begin()?;
    verify_expected_sequence_number(seq, reply.sequence_number)?;
    verify_expected_service_call(CALL, &reply.name)?;
    if reply.message_type == TMessageType::Exception {
        let remote = thrift::Error::read_application_error_from_in_protocol(i)?;
        i.read_message_end()?;
        return Err(thrift::Error::Application(remote));
    }
    verify_expected_message_type(TMessageType::Reply, reply.message_type)?;
    let mut io = None;
    i.read_struct_begin()?;
    loop {
        let field = i.read_field_begin()?;
        if field.field_type == TType::Stop {
            break;
        }
        match field_id(&field)? {
            1 => io = Some(TIOError::read_from_in_protocol(i)?),
            _ => i.skip(field.field_type)?,
        }
        i.read_field_end()?;
    }
    i.read_struct_end()?;
    i.read_message_end()?;
    match io {
        Some(io) => Err(thrift::Error::User(Box::new(io))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol, TOutputProtocol};
    use thrift::transport::{ReadHalf, TBufferChannel, TIoChannel, WriteHalf};

    use super::*;

    type Client = THBaseServiceSyncClient<
        TBinaryInputProtocol<ReadHalf<TBufferChannel>>,
        TBinaryOutputProtocol<WriteHalf<TBufferChannel>>,
    >;

    /// A client over an in-memory channel whose reply is `reply`, and a handle to what it
    /// writes.
    fn client(reply: &[u8]) -> (Client, TBufferChannel) {
        let mut channel = TBufferChannel::with_capacity(4096, 1 << 16);
        channel.set_readable_bytes(reply);
        let (read, write) = channel.clone().split().expect("split");
        let client = THBaseServiceSyncClient::new(
            TBinaryInputProtocol::new(read, true),
            TBinaryOutputProtocol::new(write, true),
        );
        (client, channel)
    }

    fn puts() -> Vec<TPut> {
        let cell = |q: &str, ts: i64| TColumnValue::new(b"t".to_vec(), q.into(), b"1".to_vec(), ts);
        vec![
            TPut::new(b"a".to_vec(), vec![cell("1", 1000), cell("2", 2000)], None),
            TPut::new(b"b".to_vec(), vec![cell("v", 3000)], None),
        ]
    }

    /// The reply a gateway sends to call number 1: success, or a `TIOError`.
    fn reply(io: Option<&TIOError>) -> Vec<u8> {
        let channel = TBufferChannel::with_capacity(0, 4096);
        let (_, write) = channel.clone().split().expect("split");
        let mut o = TBinaryOutputProtocol::new(write, true);
        let ident = TMessageIdentifier::new("putMultiple", TMessageType::Reply, 1);
        o.write_message_begin(&ident).unwrap();
        o.write_struct_begin(&TStructIdentifier::new("r")).unwrap();
        if let Some(io) = io {
            o.write_field_begin(&TFieldIdentifier::new("io", TType::Struct, 1))
                .unwrap();
            io.write_to_out_protocol(&mut o).unwrap();
            o.write_field_end().unwrap();
        }
        o.write_field_stop().unwrap();
        o.write_struct_end().unwrap();
        o.write_message_end().unwrap();
        o.flush().unwrap();
        channel.write_bytes()
    }

    #[test]
    fn put_multiple_ref_writes_what_the_generated_call_writes() {
        let ok = reply(None);
        let (mut generated, sent_generated) = client(&ok);
        generated
            .put_multiple(b"tbl".to_vec(), puts())
            .expect("generated call");
        let (mut borrowed, sent_borrowed) = client(&ok);
        put_multiple_ref(&mut borrowed, b"tbl", &puts()).expect("borrowed call");
        assert!(!sent_generated.write_bytes().is_empty());
        assert_eq!(sent_borrowed.write_bytes(), sent_generated.write_bytes());
    }

    #[test]
    fn put_multiple_ref_returns_the_gateways_io_error() {
        let io = TIOError::new("RegionTooBusyException".to_string(), true);
        let (mut c, _) = client(&reply(Some(&io)));
        let err = put_multiple_ref(&mut c, b"tbl", &puts()).expect_err("an IOError");
        let thrift::Error::User(user) = err else {
            panic!("not a user exception: {err:?}")
        };
        assert_eq!(user.downcast_ref::<TIOError>(), Some(&io));
    }
}
