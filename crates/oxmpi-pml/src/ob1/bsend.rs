//! Buffered sends (seed 000's buffered pipeline): `MPI_Bsend` copies the
//! message into the attached buffer and sends the copy as an internal
//! standard send; the user's request completes once the copy is made.

use super::*;

impl State {
    pub(super) fn bsend_start(&mut self, r: ReqRef) {
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        let need = s.len;
        let Some(b) = self.bsend.as_mut() else {
            self.fail(r, ErrClass::Buffer, "MPI_Bsend with no buffer attached");
            return;
        };
        // First fit between live allocations.
        let mut at = 0usize;
        let mut found = None;
        for &(off, len) in &b.used {
            if off - at >= need {
                found = Some(at);
                break;
            }
            at = off + len;
        }
        if found.is_none() && b.region.len() - at >= need {
            found = Some(at);
        }
        let Some(off) = found else {
            let free = b.region.len() - b.used.iter().map(|u| u.1).sum::<usize>();
            let msg = format!(
                "attached buffer too small: this message needs {need} bytes, {free} are free"
            );
            self.fail(r, ErrClass::Buffer, &msg);
            return;
        };
        let range = (off, need);
        let pos = b.used.partition_point(|u| u.0 < off);
        b.used.insert(pos, range);
        let space = b
            .region
            .slice(off, need)
            .expect("inside the attached buffer");
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        // Pack the message into the attached buffer (the buffered pipeline:
        // the user's request is complete once its data is packed).
        let mut tmp = vec![0u8; need];
        s.buf.pack(0, &mut tmp);
        space.write(0, &tmp);
        let inner = SendReq {
            ctx: s.ctx,
            dst: s.dst,
            peer: s.peer,
            tag: s.tag,
            buf: Buffer::Contig(space),
            len: need,
            mode: SendMode::Standard,
            proto: Proto::Eager,
            first_len: 0,
            first_sent: false,
            first_done: false,
            need_ack: false,
            acked: false,
            fin: false,
            recv_req: ReqRef::default(),
            sched_off: 0,
            end_off: 0,
            inflight: 0,
            put_expect: 0,
            put_done: 0,
            reg: None,
            bsend: Some(range),
            internal: true,
            credit: 0,
            seq: 0,
            rkey: None,
            rget_open: false,
            split: false,
            cancel: CancelState::None,
        };
        let ir = self.reqs.alloc(|| Req {
            done: false,
            status: Status::default(),
            user_freed: false,
            persistent: false,
            active: true,
            kind: Kind::Send(inner),
        });
        self.complete(r);
        self.actions.push_back(Action::Start(ir));
    }
}
