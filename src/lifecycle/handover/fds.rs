//! Passing file descriptors between the old and the new router process:
//! a `SOCK_SEQPACKET` Unix socket pair (one message per `recvmsg`, its
//! descriptors with it, so no framing of our own can split a message from
//! its descriptors) and `sendmsg`/`recvmsg` with `SCM_RIGHTS`.
//!
//! This is the crate's only `unsafe` code: the standard library has no
//! `SCM_RIGHTS` on stable Rust, and `libc` (already linked through tokio
//! and mio) gives the calls without another dependency such as `nix`, whose
//! size is out of proportion to four system calls. Each `unsafe` block
//! says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// At most this many descriptors come with one message (the listeners:
/// LDAP, LDAPS, admin; a session: one).
pub const MAX_FDS: usize = 4;

/// The largest message (a session's state with the bytes it had read,
/// which are under 64 KiB: a larger partial request is never handed over).
pub const MAX_MSG: usize = 256 * 1024;

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, close-on-exec.
pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
    let mut fds: [libc::c_int; 2] = [-1, -1];
    // SAFETY: socketpair writes two descriptors into the array it is given,
    // which has room for two; nothing else is touched.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created by socketpair and are
    // owned by nothing else.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((UnixStream::from(a), UnixStream::from(b)))
}

/// Let `fd` survive `exec` (clear close-on-exec), for the new process.
pub fn inheritable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor borrowed for the call; F_SETFD only
    // changes its flags.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The handover socket the old process gave this one as descriptor `raw`
/// (`serve --handover-fd`): checked to be an open Unix socket, made
/// close-on-exec again, and owned from now on.
pub fn inherited(raw: RawFd) -> io::Result<UnixStream> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {raw} is not a Unix socket"),
        )
    };
    if raw < 3 {
        return Err(bad());
    }
    // SAFETY: fcntl F_GETFD only reads the flags of the number given; on a
    // number that is no open descriptor it fails with EBADF.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `domain`, an int
    // whose size `len` is.
    let rc = unsafe {
        libc::getsockopt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || domain != libc::AF_UNIX {
        return Err(bad());
    }
    // SAFETY: the descriptor is open (checked above), was inherited for
    // this purpose from the parent, and nothing else in this process owns
    // it: `--handover-fd` is read once, at startup.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: as in `inheritable`, on a descriptor owned here.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixStream::from(fd))
}

/// Room for the control message of [`MAX_FDS`] descriptors, aligned for
/// `cmsghdr` (u64 words).
fn control_room(fds: usize) -> (Vec<u64>, usize) {
    let payload = (fds * std::mem::size_of::<RawFd>()) as libc::c_uint;
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    (vec![0u64; space.div_ceil(8)], space)
}

/// Send `bytes` as one message, with `fds`.
pub fn send(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS || bytes.len() > MAX_MSG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "handover message too large",
        ));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let (mut control, space) = control_room(raw.len());
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is a valid value
    // (null pointers, zero lengths); it has private padding fields on some
    // targets, so it is not built field by field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` zeroed, aligned bytes,
        // room for one cmsghdr and `raw.len()` descriptors
        // (CMSG_SPACE), so CMSG_FIRSTHDR is not null and CMSG_DATA has
        // room for the copy.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len =
                libc::CMSG_LEN((raw.len() * std::mem::size_of::<RawFd>()) as libc::c_uint) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr(),
                libc::CMSG_DATA(c).cast::<RawFd>(),
                raw.len(),
            );
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` (over `bytes`) and `control`, all
        // alive for the call; the kernel only reads them. MSG_NOSIGNAL: a
        // peer gone is an error, not SIGPIPE.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n as usize != bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "handover message cut short",
            ));
        }
        return Ok(());
    }
}

/// Receive one message into `buf`: its length (0: the peer closed) and
/// the descriptors that came with it (close-on-exec). A message or
/// control data too large for the room given is an error (the descriptors
/// that came are closed).
pub fn recv(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let (mut control, space) = control_room(MAX_FDS);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in `send`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both
        // writable and alive for the call, with their lengths.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
            }
            _ => return Err(e),
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with `msg_controllen` bytes of
    // well-formed cmsghdrs; the CMSG_* macros walk them within that
    // length. Each SCM_RIGHTS descriptor is new in this process and owned
    // by nothing else, so OwnedFd takes it (and closes it on any error
    // below). The data may be unaligned: read_unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "handover message truncated",
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_and_bytes_arrive_together_one_message_at_a_time() {
        let (a, b) = pair().unwrap();
        let (mut x, y) = UnixStream::pair().unwrap();
        send(&a, b"one", &[y.as_fd()]).unwrap();
        send(&a, b"two", &[]).unwrap();
        drop(y);
        let mut buf = [0u8; 16];
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"one"[..], 1));
        let (n, none) = recv(&b, &mut buf).unwrap();
        assert_eq!((&buf[..n], none.len()), (&b"two"[..], 0));
        // The descriptor that came is the other end of `x`.
        let mut y = UnixStream::from(fds.into_iter().next().unwrap());
        x.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        y.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        drop(a);
        assert_eq!(recv(&b, &mut buf).unwrap().0, 0, "closed");
    }

    #[test]
    fn a_message_larger_than_the_room_is_an_error_not_a_cut() {
        let (a, b) = pair().unwrap();
        send(&a, &[7u8; 100], &[]).unwrap();
        let mut small = [0u8; 10];
        assert!(recv(&b, &mut small).is_err());
    }

    #[test]
    fn only_unix_sockets_are_taken_as_inherited() {
        assert!(inherited(0).is_err());
        assert!(inherited(1_000_000).is_err());
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(inherited(f.as_raw_fd()).is_err());
    }
}
