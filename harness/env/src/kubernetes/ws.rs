//! The WebSocket framing (RFC 6455) `pods/exec` speaks once the API server has switched
//! protocols: a client's frames are masked, a server's are not; pings are answered, fragments
//! joined. The upgrade itself is an ordinary HTTP request (reqwest's `upgrade`), so TLS and the
//! bearer token are the API client's own.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Binary data (every channel message of `v4`/`v5.channel.k8s.io`).
pub const BINARY: u8 = 0x2;
const CONTINUATION: u8 = 0x0;
const TEXT: u8 = 0x1;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// The largest message accepted (a channel message is a chunk of a stream, never this big).
const MAX_MESSAGE: usize = 64 << 20;

/// One side of a WebSocket connection: the client.
pub struct Client<S> {
    io: S,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// The client over a connection whose upgrade succeeded.
    pub fn new(io: S) -> Self {
        Client { io }
    }

    /// Send one whole message, masked as a client must.
    pub async fn send(&mut self, opcode: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut frame = Vec::with_capacity(payload.len() + 14);
        frame.push(0x80 | opcode);
        let len = payload.len();
        if len < 126 {
            frame.push(0x80 | len as u8);
        } else if let Ok(short) = u16::try_from(len) {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&short.to_be_bytes());
        } else {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
        let key = *uuid::Uuid::new_v4().as_bytes();
        let mask = [key[0], key[1], key[2], key[3]];
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.io.write_all(&frame).await?;
        self.io.flush().await
    }

    /// The next data message (opcode, payload); `None` once the server closed the connection.
    pub async fn recv(&mut self) -> std::io::Result<Option<(u8, Vec<u8>)>> {
        let mut message: Option<(u8, Vec<u8>)> = None;
        loop {
            let mut head = [0u8; 2];
            match self.io.read_exact(&mut head).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0F;
            let masked = head[1] & 0x80 != 0;
            let len = match head[1] & 0x7F {
                126 => {
                    let mut b = [0u8; 2];
                    self.io.read_exact(&mut b).await?;
                    u64::from(u16::from_be_bytes(b))
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.io.read_exact(&mut b).await?;
                    u64::from_be_bytes(b)
                }
                short => u64::from(short),
            };
            let len = usize::try_from(len)
                .ok()
                .filter(|len| *len <= MAX_MESSAGE)
                .ok_or_else(|| std::io::Error::other("a WebSocket frame over 64 MiB"))?;
            let mut mask = [0u8; 4];
            if masked {
                self.io.read_exact(&mut mask).await?;
            }
            let mut payload = vec![0u8; len];
            self.io.read_exact(&mut payload).await?;
            if masked {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= mask[i % 4];
                }
            }
            match opcode {
                CLOSE => {
                    // Answer the close as the protocol asks; the connection ends either way.
                    let _ = self.send(CLOSE, &payload[..payload.len().min(2)]).await;
                    return Ok(None);
                }
                PING => self.send(PONG, &payload).await?,
                PONG => {}
                CONTINUATION => {
                    let Some((_, data)) = message.as_mut() else {
                        return Err(std::io::Error::other("a continuation with no message"));
                    };
                    if data.len() + payload.len() > MAX_MESSAGE {
                        return Err(std::io::Error::other("a WebSocket message over 64 MiB"));
                    }
                    data.extend_from_slice(&payload);
                }
                BINARY | TEXT => message = Some((opcode, payload)),
                other => {
                    return Err(std::io::Error::other(format!(
                        "an unknown WebSocket opcode {other:#x}"
                    )));
                }
            }
            if fin
                && let Some(done) =
                    message.take_if(|_| matches!(opcode, CONTINUATION | BINARY | TEXT))
            {
                return Ok(Some(done));
            }
        }
    }

    /// Close the connection politely (status 1000).
    pub async fn close(&mut self) {
        // A peer already gone is closed enough.
        let _ = self.send(CLOSE, &1000u16.to_be_bytes()).await;
        let _ = self.io.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's frames as the RFC's examples spell them, read by the client; the client's
    /// frames unmasked again equal what was sent.
    #[tokio::test]
    async fn frames_round_trip_with_fragments_and_pings() {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let mut ws = Client::new(client);
        // "Hel" + "lo" as a fragmented text message, with a ping between the fragments.
        server
            .write_all(&[
                0x01, 0x03, b'H', b'e', b'l', 0x89, 0x00, 0x80, 0x02, b'l', b'o',
            ])
            .await
            .unwrap();
        let big = vec![7u8; 70_000];
        let mut frame = vec![0x82, 127];
        frame.extend_from_slice(&(big.len() as u64).to_be_bytes());
        frame.extend_from_slice(&big);
        server.write_all(&frame).await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), Some((TEXT, b"Hello".to_vec())));
        // The ping was answered with a masked pong.
        let mut pong = [0u8; 6];
        server.read_exact(&mut pong).await.unwrap();
        assert_eq!(pong[0], 0x80 | PONG);
        assert_eq!(pong[1], 0x80);
        assert_eq!(ws.recv().await.unwrap(), Some((BINARY, big)));
        ws.send(BINARY, b"\x00abc").await.unwrap();
        let mut sent = [0u8; 10];
        server.read_exact(&mut sent).await.unwrap();
        assert_eq!(sent[..2], [0x82, 0x84]);
        let mask = &sent[2..6];
        let data: Vec<u8> = sent[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4])
            .collect();
        assert_eq!(data, b"\x00abc");
        server.write_all(&[0x88, 0x02, 0x03, 0xE8]).await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), None);
    }
}
