//! Transport: lazily (re)connected Thrift clients over TBinaryProtocol on a buffered socket
//! (replies decoded by [`BinaryIn`], straight from the read buffer).

use std::fmt;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{AlreadyExists, HbaseSyncClient, IOError, IllegalArgument};
use thrift::protocol::TBinaryOutputProtocol;
use thrift::transport::{ReadHalf, TBufferedWriteTransport, TIoChannel, TTcpChannel, WriteHalf};

use super::config::HbaseConfig;
use super::thrift2::{THBaseServiceSyncClient, TIOError, TIllegalArgument};
use super::wire::BinaryIn;
use super::Error;

type In = BinaryIn<ReadHalf<TTcpChannel>>;
type Out = TBinaryOutputProtocol<TBufferedWriteTransport<WriteHalf<TTcpChannel>>>;

/// The Thrift1 (`Hbase`) client of the `hbase-thrift` crate.
pub(crate) type Thrift1 = HbaseSyncClient<In, Out>;
/// Our generated Thrift2 (`THBaseService`) client.
pub(crate) type Thrift2 = THBaseServiceSyncClient<In, Out>;

/// A Thrift client that can be built on a connected socket.
pub(crate) trait FromProtocols {
    fn from_protocols(input: In, output: Out) -> Self;
}

impl FromProtocols for Thrift1 {
    fn from_protocols(input: In, output: Out) -> Self {
        HbaseSyncClient::new(input, output)
    }
}

impl FromProtocols for Thrift2 {
    fn from_protocols(input: In, output: Out) -> Self {
        THBaseServiceSyncClient::new(input, output)
    }
}

/// Socket buffer sizes: a 4 MiB batch goes out in few writes.
const WRITE_BUFFER: usize = 256 << 10;
const READ_BUFFER: usize = 64 << 10;

/// One gateway connection, opened on first use and replaced after a transport failure or a
/// long idle period (the gateways close connections idle for 60 s).
pub(crate) struct Connection<C> {
    addr: String,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    idle_reconnect: Duration,
    client: Option<C>,
    last_used: Instant,
}

impl<C> fmt::Debug for Connection<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("connected", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl<C: FromProtocols> Connection<C> {
    /// A connection to `addr` (not opened yet) with the timeouts of `cfg`.
    pub(crate) fn new(addr: &str, cfg: &HbaseConfig) -> Self {
        Connection {
            addr: addr.to_string(),
            connect_timeout: cfg.connect_timeout,
            rpc_timeout: cfg.rpc_timeout,
            idle_reconnect: cfg.idle_reconnect,
            client: None,
            last_used: Instant::now(),
        }
    }

    fn connect(&self, call: &'static str) -> Result<C, Error> {
        let transport = |message: String| Error::Transport {
            addr: self.addr.clone(),
            call,
            message,
        };
        let addrs = self
            .addr
            .to_socket_addrs()
            .map_err(|e| transport(format!("cannot resolve {}: {e}", self.addr)))?;
        let mut last = format!("{} resolves to no address", self.addr);
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.connect_timeout) {
                Ok(stream) => {
                    let setup = stream
                        .set_nodelay(true)
                        .and_then(|()| stream.set_read_timeout(Some(self.rpc_timeout)))
                        .and_then(|()| stream.set_write_timeout(Some(self.rpc_timeout)));
                    if let Err(e) = setup {
                        last = format!("setting socket options: {e}");
                        continue;
                    }
                    let (read, write) = TTcpChannel::with_stream(stream)
                        .split()
                        .map_err(|e| transport(format!("splitting the socket: {e}")))?;
                    let input = BinaryIn::new(read, READ_BUFFER);
                    let output = TBinaryOutputProtocol::new(
                        TBufferedWriteTransport::with_capacity(WRITE_BUFFER, write),
                        true,
                    );
                    return Ok(C::from_protocols(input, output));
                }
                Err(e) => last = format!("connecting to {addr}: {e}"),
            }
        }
        Err(transport(last))
    }

    /// Runs one Thrift call on `table` (`-` if it names none), connecting first if needed.
    ///
    /// After a transport or protocol failure the connection is dropped, so the next call starts
    /// on a fresh one (a half-read reply would desynchronise the old one).
    pub(crate) fn call<T>(
        &mut self,
        call: &'static str,
        table: &str,
        f: impl FnOnce(&mut C) -> thrift::Result<T>,
    ) -> Result<T, Error> {
        if self.last_used.elapsed() >= self.idle_reconnect {
            self.client = None;
        }
        let client = match self.client.take() {
            Some(client) => client,
            None => self.connect(call)?,
        };
        let client = self.client.insert(client);
        let result = f(client);
        self.last_used = Instant::now();
        result.map_err(|e| {
            let err = classify(e, &self.addr, call, table);
            if matches!(err, Error::Transport { .. } | Error::Protocol { .. }) {
                self.client = None;
            }
            err
        })
    }
}

/// Turns a Thrift error into an [`Error`] that says what failed.
pub(crate) fn classify(e: thrift::Error, addr: &str, call: &'static str, table: &str) -> Error {
    let server = |message: String, can_retry: Option<bool>| {
        if message.contains("TableNotFoundException") {
            Error::TableNotFound {
                table: table.to_string(),
                addr: addr.to_string(),
            }
        } else {
            Error::Server {
                call,
                table: table.to_string(),
                message,
                can_retry,
            }
        }
    };
    match e {
        thrift::Error::Transport(t) => match t.kind {
            thrift::TransportErrorKind::SizeLimit | thrift::TransportErrorKind::NegativeSize => {
                Error::Protocol {
                    addr: addr.to_string(),
                    call,
                    message: t.message,
                }
            }
            _ => Error::Transport {
                addr: addr.to_string(),
                call,
                message: if t.message.is_empty() {
                    format!("{:?}", t.kind)
                } else {
                    t.message
                },
            },
        },
        thrift::Error::Protocol(p) => Error::Protocol {
            addr: addr.to_string(),
            call,
            message: format!("{:?}: {}", p.kind, p.message),
        },
        thrift::Error::Application(a) => server(
            format!("Thrift application error {:?}: {}", a.kind, a.message),
            None,
        ),
        thrift::Error::User(user) => {
            if let Some(io) = user.downcast_ref::<IOError>() {
                server(io.message.clone().unwrap_or_default(), io.can_retry)
            } else if let Some(io) = user.downcast_ref::<TIOError>() {
                server(io.message.clone().unwrap_or_default(), io.can_retry)
            } else if let Some(arg) = user.downcast_ref::<IllegalArgument>() {
                Error::IllegalArgument {
                    call,
                    table: table.to_string(),
                    message: arg.message.clone().unwrap_or_default(),
                }
            } else if let Some(arg) = user.downcast_ref::<TIllegalArgument>() {
                Error::IllegalArgument {
                    call,
                    table: table.to_string(),
                    message: arg.message.clone().unwrap_or_default(),
                }
            } else if let Some(exists) = user.downcast_ref::<AlreadyExists>() {
                server(
                    format!(
                        "TableExistsException: {}",
                        exists.message.clone().unwrap_or_default()
                    ),
                    Some(false),
                )
            } else {
                Error::Protocol {
                    addr: addr.to_string(),
                    call,
                    message: format!("unexpected exception {user}"),
                }
            }
        }
    }
}
