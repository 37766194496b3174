//! The libfabric binding: the one file of the `ofi` MTL with `unsafe`.
//!
//! `libfabric.so.1` is opened at run time ([`Lib::load`]) and six exported
//! functions are resolved from it (`fi_version`, `fi_getinfo`,
//! `fi_freeinfo`, `fi_dupinfo`, `fi_fabric`, `fi_strerror`). Everything
//! else libfabric's headers define as `static inline` wrappers that call
//! through the ops tables of the objects (`fi_domain` is
//! `fabric->ops->domain(...)`, `fi_tsend` is `ep->tagged->send(...)`): the
//! structs below mirror those tables and the attribute structs of the 1.17
//! headers (`rdma/fabric.h`, `fi_domain.h`, `fi_endpoint.h`, `fi_eq.h`,
//! `fi_tagged.h`, `fi_cm.h`) field for field, and a unit test compares
//! their sizes and offsets with the C compiler's. Each ops table libfabric
//! gives a `size` is checked to hold the entries used before the object is
//! used ([`Endpoint::open`]).
//!
//! What this file promises the rest of the module: a [`Endpoint`] owns its
//! fabric, domain, address vector, completion queue and endpoint (closed in
//! reverse order on drop) and the operation contexts ([`Ctx`]) handed to
//! libfabric, at stable addresses that live as long as the endpoint; its
//! methods are safe to call. The buffers given to sends and receives are
//! [`MemRegion`]s, whose creators promised (the one `unsafe` promise of the
//! layers above) that the memory stays valid until the operation completes.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::{offset_of, size_of};
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};

use oxmpi_btl::mem::MemRegion;

// ---- constants (rdma/fabric.h, fi_errno.h, fi_eq.h) ----

/// `FI_TAGGED`.
pub const FI_TAGGED: u64 = 1 << 3;
/// `FI_RECV`.
pub const FI_RECV: u64 = 1 << 10;
/// `FI_SEND` (`FI_TRANSMIT`).
pub const FI_SEND: u64 = 1 << 11;
/// `FI_PEEK`.
pub const FI_PEEK: u64 = 1 << 19;
/// `FI_SOURCE`.
pub const FI_SOURCE: u64 = 1 << 57;
/// `FI_NAMED_RX_CTX`.
pub const FI_NAMED_RX_CTX: u64 = 1 << 58;
/// `FI_DIRECTED_RECV`.
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
/// `FI_CLAIM` (an operation flag).
pub const FI_CLAIM: u64 = 1 << 59;
/// `FI_CONTEXT` (a mode bit).
pub const FI_CONTEXT: u64 = 1 << 59;
/// `FI_CONTEXT2` (a mode bit).
pub const FI_CONTEXT2: u64 = 1 << 52;
/// `FI_ADDR_UNSPEC`.
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
/// `FI_ORDER_SAS`.
const FI_ORDER_SAS: u64 = 1 << 8;
const FI_MR_VIRT_ADDR: c_int = 1 << 4;
const FI_MR_ALLOCATED: c_int = 1 << 5;
const FI_MR_PROV_KEY: c_int = 1 << 6;
const FI_EP_RDM: c_int = 3;
const FI_THREAD_DOMAIN: c_int = 3;
const FI_AV_TABLE: c_int = 2;
const FI_CQ_FORMAT_TAGGED: c_int = 4;
const FI_WAIT_NONE: c_int = 0;
const FI_WAIT_FD: c_int = 3;
const FI_GETWAIT: c_int = 5;
const FI_ENABLE: c_int = 6;
const FI_ETOOSMALL: c_int = 257;

/// `FI_EAGAIN`.
pub const FI_EAGAIN: i32 = 11;
/// `FI_ENOMSG`.
pub const FI_ENOMSG: i32 = 42;
/// `FI_ENODATA`.
pub const FI_ENODATA: i32 = 61;
/// `FI_ECANCELED`.
pub const FI_ECANCELED: i32 = 125;
/// `FI_EAVAIL`.
pub const FI_EAVAIL: i32 = 259;
/// `FI_ETRUNC`.
pub const FI_ETRUNC: i32 = 265;

// ---- the C structs (libfabric 1.17) ----

type FnPtr = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub(crate) struct Iovec {
    iov_base: *mut c_void,
    iov_len: usize,
}

#[repr(C)]
pub(crate) struct Fid {
    fclass: usize,
    context: *mut c_void,
    ops: *mut FiOps,
}

#[repr(C)]
pub(crate) struct FiOps {
    size: usize,
    close: Option<unsafe extern "C" fn(*mut Fid) -> c_int>,
    bind: Option<unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int>,
    control: Option<unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int>,
    ops_open: FnPtr,
    tostr: FnPtr,
    ops_set: FnPtr,
}

#[repr(C)]
pub(crate) struct FiTxAttr {
    caps: u64,
    mode: u64,
    op_flags: u64,
    msg_order: u64,
    comp_order: u64,
    inject_size: usize,
    size: usize,
    iov_limit: usize,
    rma_iov_limit: usize,
    tclass: u32,
}

#[repr(C)]
pub(crate) struct FiRxAttr {
    caps: u64,
    mode: u64,
    op_flags: u64,
    msg_order: u64,
    comp_order: u64,
    total_buffered_recv: usize,
    size: usize,
    iov_limit: usize,
}

#[repr(C)]
pub(crate) struct FiEpAttr {
    type_: c_int,
    protocol: u32,
    protocol_version: u32,
    max_msg_size: usize,
    msg_prefix_size: usize,
    max_order_raw_size: usize,
    max_order_war_size: usize,
    max_order_waw_size: usize,
    mem_tag_format: u64,
    tx_ctx_cnt: usize,
    rx_ctx_cnt: usize,
    auth_key_size: usize,
    auth_key: *mut u8,
}

#[repr(C)]
pub(crate) struct FiDomainAttr {
    domain: *mut c_void,
    name: *mut c_char,
    threading: c_int,
    control_progress: c_int,
    data_progress: c_int,
    resource_mgmt: c_int,
    av_type: c_int,
    mr_mode: c_int,
    mr_key_size: usize,
    cq_data_size: usize,
    cq_cnt: usize,
    ep_cnt: usize,
    tx_ctx_cnt: usize,
    rx_ctx_cnt: usize,
    max_ep_tx_ctx: usize,
    max_ep_rx_ctx: usize,
    max_ep_stx_ctx: usize,
    max_ep_srx_ctx: usize,
    cntr_cnt: usize,
    mr_iov_limit: usize,
    caps: u64,
    mode: u64,
    auth_key: *mut u8,
    auth_key_size: usize,
    max_err_data: usize,
    mr_cnt: usize,
    tclass: u32,
}

#[repr(C)]
pub(crate) struct FiFabricAttr {
    fabric: *mut c_void,
    name: *mut c_char,
    prov_name: *mut c_char,
    prov_version: u32,
    api_version: u32,
}

#[repr(C)]
pub(crate) struct FiInfo {
    next: *mut FiInfo,
    caps: u64,
    mode: u64,
    addr_format: u32,
    src_addrlen: usize,
    dest_addrlen: usize,
    src_addr: *mut c_void,
    dest_addr: *mut c_void,
    handle: *mut Fid,
    tx_attr: *mut FiTxAttr,
    rx_attr: *mut FiRxAttr,
    ep_attr: *mut FiEpAttr,
    domain_attr: *mut FiDomainAttr,
    fabric_attr: *mut FiFabricAttr,
    nic: *mut c_void,
}

#[repr(C)]
pub(crate) struct FidFabric {
    fid: Fid,
    ops: *mut FiOpsFabric,
    api_version: u32,
}

#[repr(C)]
pub(crate) struct FiOpsFabric {
    size: usize,
    domain: Option<
        unsafe extern "C" fn(
            *mut FidFabric,
            *mut FiInfo,
            *mut *mut FidDomain,
            *mut c_void,
        ) -> c_int,
    >,
    passive_ep: FnPtr,
    eq_open: FnPtr,
    wait_open: FnPtr,
    trywait: Option<unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int>,
    domain2: FnPtr,
}

#[repr(C)]
pub(crate) struct FidDomain {
    fid: Fid,
    ops: *mut FiOpsDomain,
    mr: *mut c_void,
}

type EpOpen = Option<
    unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int,
>;

#[repr(C)]
pub(crate) struct FiOpsDomain {
    size: usize,
    av_open: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut FiAvAttr, *mut *mut FidAv, *mut c_void) -> c_int,
    >,
    cq_open: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut FiCqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    >,
    endpoint: EpOpen,
    scalable_ep: EpOpen,
    cntr_open: FnPtr,
    poll_open: FnPtr,
    stx_ctx: FnPtr,
    srx_ctx: FnPtr,
    query_atomic: FnPtr,
    query_collective: FnPtr,
    endpoint2: FnPtr,
}

#[repr(C)]
pub(crate) struct FiAvAttr {
    type_: c_int,
    rx_ctx_bits: c_int,
    count: usize,
    ep_per_node: usize,
    name: *const c_char,
    map_addr: *mut c_void,
    flags: u64,
}

#[repr(C)]
pub(crate) struct FidAv {
    fid: Fid,
    ops: *mut FiOpsAv,
}

#[repr(C)]
pub(crate) struct FiOpsAv {
    size: usize,
    insert: Option<
        unsafe extern "C" fn(*mut FidAv, *const c_void, usize, *mut u64, u64, *mut c_void) -> c_int,
    >,
    insertsvc: FnPtr,
    insertsym: FnPtr,
    remove: FnPtr,
    lookup: FnPtr,
    straddr: FnPtr,
    av_set: FnPtr,
}

#[repr(C)]
pub(crate) struct FiCqAttr {
    size: usize,
    flags: u64,
    format: c_int,
    wait_obj: c_int,
    signaling_vector: c_int,
    wait_cond: c_int,
    wait_set: *mut c_void,
}

#[repr(C)]
pub(crate) struct FidCq {
    fid: Fid,
    ops: *mut FiOpsCq,
}

#[repr(C)]
pub(crate) struct FiOpsCq {
    size: usize,
    read: FnPtr,
    readfrom: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *mut u64) -> isize>,
    readerr: Option<unsafe extern "C" fn(*mut FidCq, *mut FiCqErrEntry, u64) -> isize>,
    sread: FnPtr,
    sreadfrom: FnPtr,
    signal: FnPtr,
    strerror: Option<
        unsafe extern "C" fn(*mut FidCq, c_int, *const c_void, *mut c_char, usize) -> *const c_char,
    >,
}

/// `struct fi_cq_tagged_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CqEntry {
    op_context: *mut c_void,
    /// Completion flags (`FI_SEND`, `FI_RECV`, `FI_REMOTE_CQ_DATA`, ...).
    pub flags: u64,
    /// Bytes received (a receive), the message's length (a peek).
    pub len: usize,
    buf: *mut c_void,
    /// The remote CQ data.
    pub data: u64,
    /// The message's tag.
    pub tag: u64,
}

impl CqEntry {
    /// The operation's context (compared with [`Ctx`] addresses).
    pub fn context(&self) -> usize {
        self.op_context as usize
    }
}

impl Default for CqEntry {
    fn default() -> Self {
        CqEntry {
            op_context: ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: ptr::null_mut(),
            data: 0,
            tag: 0,
        }
    }
}

#[repr(C)]
pub(crate) struct FiCqErrEntry {
    op_context: *mut c_void,
    flags: u64,
    len: usize,
    buf: *mut c_void,
    data: u64,
    tag: u64,
    olen: usize,
    err: c_int,
    prov_errno: c_int,
    err_data: *mut c_void,
    err_data_size: usize,
}

#[repr(C)]
pub(crate) struct FidEp {
    fid: Fid,
    ops: *mut FiOpsEp,
    cm: *mut FiOpsCm,
    msg: *mut c_void,
    rma: *mut c_void,
    tagged: *mut FiOpsTagged,
    atomic: *mut c_void,
    collective: *mut c_void,
}

type CtxOpen = Option<
    unsafe extern "C" fn(*mut FidEp, c_int, *mut c_void, *mut *mut FidEp, *mut c_void) -> c_int,
>;

#[repr(C)]
pub(crate) struct FiOpsEp {
    size: usize,
    cancel: Option<unsafe extern "C" fn(*mut Fid, *mut c_void) -> isize>,
    getopt: FnPtr,
    setopt: FnPtr,
    tx_ctx: CtxOpen,
    rx_ctx: CtxOpen,
    rx_size_left: FnPtr,
    tx_size_left: FnPtr,
}

#[repr(C)]
pub(crate) struct FiOpsCm {
    size: usize,
    setname: FnPtr,
    getname: Option<unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int>,
    getpeer: FnPtr,
    connect: FnPtr,
    listen: FnPtr,
    accept: FnPtr,
    reject: FnPtr,
    shutdown: FnPtr,
    join: FnPtr,
}

#[repr(C)]
pub(crate) struct FiOpsTagged {
    size: usize,
    recv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *mut c_void,
            usize,
            *mut c_void,
            u64,
            u64,
            u64,
            *mut c_void,
        ) -> isize,
    >,
    recvv: FnPtr,
    recvmsg: Option<unsafe extern "C" fn(*mut FidEp, *const FiMsgTagged, u64) -> isize>,
    send: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const c_void,
            usize,
            *mut c_void,
            u64,
            u64,
            *mut c_void,
        ) -> isize,
    >,
    sendv: FnPtr,
    sendmsg: FnPtr,
    inject: Option<unsafe extern "C" fn(*mut FidEp, *const c_void, usize, u64, u64) -> isize>,
    senddata: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const c_void,
            usize,
            *mut c_void,
            u64,
            u64,
            u64,
            *mut c_void,
        ) -> isize,
    >,
    injectdata:
        Option<unsafe extern "C" fn(*mut FidEp, *const c_void, usize, u64, u64, u64) -> isize>,
}

#[repr(C)]
pub(crate) struct FiMsgTagged {
    msg_iov: *const Iovec,
    desc: *mut *mut c_void,
    iov_count: usize,
    addr: u64,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    data: u64,
}

/// `struct fi_context2`: the provider's scratch space of one operation,
/// which must stay at its address until the operation completes. Interior
/// mutability: the provider writes it while Rust only holds shared
/// references.
#[repr(C)]
pub struct Ctx {
    internal: UnsafeCell<[*mut c_void; 8]>,
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            internal: UnsafeCell::new([ptr::null_mut(); 8]),
        }
    }

    fn as_ptr(&self) -> *mut c_void {
        self.internal.get().cast()
    }
}

// ---- the library ----

type GetInfoFn = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const FiInfo,
    *mut *mut FiInfo,
) -> c_int;
type FabricFn = unsafe extern "C" fn(*mut FiFabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int;

/// libfabric, opened at run time.
pub struct Lib {
    version: u32,
    getinfo: GetInfoFn,
    freeinfo: unsafe extern "C" fn(*mut FiInfo),
    dupinfo: unsafe extern "C" fn(*const FiInfo) -> *mut FiInfo,
    fabric: FabricFn,
    strerror: unsafe extern "C" fn(c_int) -> *const c_char,
    // Kept loaded for the process's life (see `load`); last, so that the
    // pointers above are never outlived by it.
    _lib: libloading::Library,
}

/// libfabric's `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The oldest libfabric whose struct layouts (the fields read here) match
/// this binding's.
pub const MIN_VERSION: u32 = fi_version(1, 5);

/// The API version asked for (the headers mirrored).
pub const API_VERSION: u32 = fi_version(1, 17);

fn libs() -> &'static Mutex<HashMap<String, Arc<Lib>>> {
    static LIBS: OnceLock<Mutex<HashMap<String, Arc<Lib>>>> = OnceLock::new();
    LIBS.get_or_init(Default::default)
}

impl Lib {
    /// Opens the library file `path` (a name `dlopen` searches for, or a
    /// path) once per process and resolves its functions. Errors are the
    /// loader's words.
    pub fn load(path: &str) -> Result<Arc<Lib>, String> {
        let mut libs = libs().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = libs.get(path) {
            return Ok(l.clone());
        }
        // SAFETY: loading libfabric runs its constructors, which only set up
        // its own state; the library is kept loaded for the life of the
        // process (the map below is never emptied), so the function
        // pointers taken from it never dangle.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        // SAFETY: each symbol is looked up with the signature libfabric
        // 1.x's `rdma/fabric.h` and `fi_errno.h` declare for it.
        let l = unsafe {
            let version: libloading::Symbol<unsafe extern "C" fn() -> u32> =
                lib.get(b"fi_version\0").map_err(|e| e.to_string())?;
            let version = version();
            Lib {
                version,
                getinfo: *lib.get(b"fi_getinfo\0").map_err(|e| e.to_string())?,
                freeinfo: *lib.get(b"fi_freeinfo\0").map_err(|e| e.to_string())?,
                dupinfo: *lib.get(b"fi_dupinfo\0").map_err(|e| e.to_string())?,
                fabric: *lib.get(b"fi_fabric\0").map_err(|e| e.to_string())?,
                strerror: *lib.get(b"fi_strerror\0").map_err(|e| e.to_string())?,
                _lib: lib,
            }
        };
        let l = Arc::new(l);
        libs.insert(path.to_owned(), l.clone());
        Ok(l)
    }

    /// The library's `fi_version()`.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// `fi_strerror(code)` (`code` positive or negative).
    pub fn strerror(&self, code: isize) -> String {
        let c = code.unsigned_abs().min(i32::MAX as usize) as c_int;
        // SAFETY: fi_strerror takes any int and returns a static string.
        let s = unsafe { (self.strerror)(c) };
        if s.is_null() {
            return format!("libfabric error {c}");
        }
        // SAFETY: a non-null result is a NUL-terminated static string.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    /// `fi_getinfo` with the hints of an RDM tagged endpoint with `caps`:
    /// every provider offered, in libfabric's order (`Ok(empty)` when none
    /// is, `Err(code)` on another failure).
    pub fn getinfo(self: &Arc<Self>, caps: u64) -> Result<InfoList, isize> {
        // SAFETY: fi_dupinfo(NULL) is fi_allocinfo(): a zeroed fi_info with
        // all its attribute structs allocated, or NULL.
        let hints = unsafe { (self.dupinfo)(ptr::null()) };
        if hints.is_null() {
            return Err(-12);
        }
        // SAFETY: `hints` and its attribute pointers were allocated by
        // fi_allocinfo (non-null checked where dereferenced); only scalar
        // fields are written, so fi_freeinfo frees exactly what it
        // allocated. fi_getinfo writes a list (or NULL) into `out`.
        unsafe {
            let h = &mut *hints;
            h.caps = caps;
            h.mode = FI_CONTEXT | FI_CONTEXT2;
            if let Some(ep) = h.ep_attr.as_mut() {
                ep.type_ = FI_EP_RDM;
            }
            if let Some(d) = h.domain_attr.as_mut() {
                d.threading = FI_THREAD_DOMAIN;
                d.mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
                d.av_type = FI_AV_TABLE;
            }
            if let Some(t) = h.tx_attr.as_mut() {
                t.msg_order = FI_ORDER_SAS;
            }
            if let Some(r) = h.rx_attr.as_mut() {
                r.msg_order = FI_ORDER_SAS;
            }
            let mut out: *mut FiInfo = ptr::null_mut();
            let version = API_VERSION.min(self.version);
            let rc = (self.getinfo)(version, ptr::null(), ptr::null(), 0, hints, &mut out);
            (self.freeinfo)(hints);
            if rc == -FI_ENODATA {
                return Ok(InfoList {
                    lib: self.clone(),
                    head: ptr::null_mut(),
                });
            }
            if rc != 0 {
                return Err(rc as isize);
            }
            Ok(InfoList {
                lib: self.clone(),
                head: out,
            })
        }
    }
}

/// What a provider offers (read from one `fi_info`).
#[derive(Clone, Debug)]
pub struct ProvInfo {
    /// `fabric_attr->prov_name` (`tcp;ofi_rxm`).
    pub prov_name: String,
    /// `fabric_attr->name`.
    pub fabric: String,
    /// `domain_attr->name`.
    pub domain: String,
    /// `caps`.
    pub caps: u64,
    /// `ep_attr->mem_tag_format`.
    pub mem_tag_format: u64,
    /// `domain_attr->cq_data_size`.
    pub cq_data_size: usize,
    /// `domain_attr->max_ep_tx_ctx`.
    pub max_ep_tx_ctx: usize,
    /// `domain_attr->max_ep_rx_ctx`.
    pub max_ep_rx_ctx: usize,
    /// `tx_attr->inject_size`: the longest message `fi_tinject` takes.
    pub inject_size: usize,
}

/// A list `fi_getinfo` returned (freed on drop).
pub struct InfoList {
    lib: Arc<Lib>,
    head: *mut FiInfo,
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric's strings in fi_info are NUL-terminated and live as
    // long as the info list, which the caller holds.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl InfoList {
    fn nodes(&self) -> Vec<*mut FiInfo> {
        let mut v = Vec::new();
        let mut p = self.head;
        while !p.is_null() {
            v.push(p);
            // SAFETY: `p` is a node of the list fi_getinfo returned, alive
            // until `self` is dropped.
            p = unsafe { (*p).next };
        }
        v
    }

    /// The providers, in order.
    pub fn providers(&self) -> Vec<ProvInfo> {
        self.nodes()
            .into_iter()
            .map(|p| {
                // SAFETY: a node of the live list; its attribute pointers are
                // null or point to structs owned by the node.
                let i = unsafe { &*p };
                // SAFETY: as above.
                let (fa, da, ea, ta) = unsafe {
                    (
                        i.fabric_attr.as_ref(),
                        i.domain_attr.as_ref(),
                        i.ep_attr.as_ref(),
                        i.tx_attr.as_ref(),
                    )
                };
                ProvInfo {
                    prov_name: fa.map(|f| cstr(f.prov_name)).unwrap_or_default(),
                    fabric: fa.map(|f| cstr(f.name)).unwrap_or_default(),
                    domain: da.map(|d| cstr(d.name)).unwrap_or_default(),
                    caps: i.caps,
                    mem_tag_format: ea.map_or(0, |e| e.mem_tag_format),
                    cq_data_size: da.map_or(0, |d| d.cq_data_size),
                    max_ep_tx_ctx: da.map_or(0, |d| d.max_ep_tx_ctx),
                    max_ep_rx_ctx: da.map_or(0, |d| d.max_ep_rx_ctx),
                    inject_size: ta.map_or(0, |t| t.inject_size),
                }
            })
            .collect()
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: the list fi_getinfo returned, freed once.
            unsafe { (self.lib.freeinfo)(self.head) };
        }
    }
}

// ---- an endpoint ----

/// A failed libfabric call: its name and return code.
#[derive(Clone, Debug)]
pub struct CallError {
    /// The call (`fi_endpoint`).
    pub call: &'static str,
    /// Its (negative) return code, or 0 for an ops table too short.
    pub code: isize,
}

/// Contexts per chunk of the context slab.
const CHUNK: usize = 256;

/// One tagged endpoint and everything it needs. With `contexts > 1` a
/// scalable endpoint of that many transmit/receive context pairs, each
/// with its own completion queue; else a plain endpoint.
pub struct Endpoint {
    lib: Arc<Lib>,
    fabric: *mut FidFabric,
    domain: *mut FidDomain,
    av: *mut FidAv,
    /// The endpoint (or the scalable endpoint).
    ep: *mut FidEp,
    /// Per context: its transmit and receive endpoints (both `ep` when not
    /// scalable) and its completion queue.
    lanes: Vec<Lane>,
    ctxs: Vec<Box<[Ctx]>>,
    rx_ctx_bits: u32,
    /// Per lane, the file descriptor of its queue's wait object
    /// (`FI_WAIT_FD`): empty when the queues have none.
    wait_fds: Vec<c_int>,
}

struct Lane {
    tx: *mut FidEp,
    rx: *mut FidEp,
    cq: *mut FidCq,
}

// SAFETY: the endpoint's objects are opened with FI_THREAD_DOMAIN: any
// thread may use them as long as calls are serialised, which `&mut self`
// on every mutating path of the owner (`OfiMtl`) ensures; nothing is tied
// to the opening thread.
unsafe impl Send for Endpoint {}

// SAFETY: a completion entry is plain data copied out of the completion
// queue; its two pointers (the operation's context and buffer) are only
// compared and converted back to the owner's slot index, never dereferenced
// through the entry, so moving entries between threads is harmless.
unsafe impl Send for CqEntry {}

/// Whether an ops table of `size` bytes holds the entry at `offset`.
fn holds(size: usize, offset: usize) -> bool {
    size >= offset + size_of::<usize>()
}

/// Returns a `CallError` unless the ops table `$ops` (of type `$ty`) is
/// non-null, and its `size` holds each named entry, each non-null. Used
/// inside an `unsafe` block on the table of an object just opened.
macro_rules! need {
    ($ops:expr, $ty:ty, $($field:ident),+) => {{
        let ops: *const $ty = $ops;
        if ops.is_null() {
            return Err(CallError { call: concat!(stringify!($ty), " (missing)"), code: 0 });
        }
        let size = (*ops).size;
        $(
            if !holds(size, offset_of!($ty, $field)) || (*ops).$field.is_none() {
                return Err(CallError {
                    call: concat!(stringify!($ty), ".", stringify!($field)),
                    code: 0,
                });
            }
        )+
    }};
}

fn check(call: &'static str, rc: c_int) -> Result<(), CallError> {
    if rc < 0 {
        Err(CallError {
            call,
            code: rc as isize,
        })
    } else {
        Ok(())
    }
}

impl Endpoint {
    /// Opens the fabric, domain, address vector (`FI_AV_TABLE`),
    /// completion queue(s) (`FI_CQ_FORMAT_TAGGED`) and endpoint of the
    /// `index`th provider of `list`, enabled. `sep: Some(n)` opens a
    /// scalable endpoint with `n` context pairs instead.
    /// `wait_fd` asks for queues with a file-descriptor wait object
    /// (`FI_WAIT_FD`, see [`Endpoint::bell`]); a provider without one gets
    /// queues without a wait object.
    pub fn open(
        list: &InfoList,
        index: usize,
        sep: Option<usize>,
        wait_fd: bool,
    ) -> Result<Endpoint, CallError> {
        let contexts = sep.unwrap_or(1).max(1);
        let node = *list.nodes().get(index).ok_or(CallError {
            call: "fi_getinfo (no such provider)",
            code: 0,
        })?;
        let mut e = Endpoint {
            lib: list.lib.clone(),
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            lanes: Vec::new(),
            ctxs: Vec::new(),
            rx_ctx_bits: 0,
            wait_fds: Vec::new(),
        };
        // Whether every queue so far has a wait descriptor.
        let mut waits = wait_fd;
        // On any error `e` is dropped and closes what was opened.
        // SAFETY: `node` is a node of the live list; every pointer passed
        // below is either from it or an out-pointer to a field of `e`; each
        // ops entry is checked present (`need!`) before it is called on the
        // object just opened.
        unsafe {
            check(
                "fi_fabric",
                (e.lib.fabric)((*node).fabric_attr, &mut e.fabric, ptr::null_mut()),
            )?;
            need!((*e.fabric).fid.ops, FiOps, close, bind, control);
            need!((*e.fabric).ops, FiOpsFabric, domain);
            let dom = (*(*e.fabric).ops).domain.expect("checked");
            check(
                "fi_domain",
                dom(e.fabric, node, &mut e.domain, ptr::null_mut()),
            )?;
            need!((*e.domain).fid.ops, FiOps, close);
            need!((*e.domain).ops, FiOpsDomain, av_open, cq_open, endpoint);
            let dops = &*(*e.domain).ops;
            let scalable = sep.is_some();
            if scalable {
                need!((*e.domain).ops, FiOpsDomain, scalable_ep);
                e.rx_ctx_bits = (usize::BITS - (contexts - 1).leading_zeros()).max(1);
            }
            let mut av_attr = FiAvAttr {
                type_: FI_AV_TABLE,
                rx_ctx_bits: e.rx_ctx_bits as c_int,
                count: 64,
                ep_per_node: 0,
                name: ptr::null(),
                map_addr: ptr::null_mut(),
                flags: 0,
            };
            check(
                "fi_av_open",
                dops.av_open.expect("checked")(e.domain, &mut av_attr, &mut e.av, ptr::null_mut()),
            )?;
            need!((*e.av).fid.ops, FiOps, close);
            need!((*e.av).ops, FiOpsAv, insert);
            let open_ep = if scalable {
                dops.scalable_ep
            } else {
                dops.endpoint
            };
            check(
                if scalable {
                    "fi_scalable_ep"
                } else {
                    "fi_endpoint"
                },
                open_ep.expect("checked")(e.domain, node, &mut e.ep, ptr::null_mut()),
            )?;
            need!((*e.ep).fid.ops, FiOps, close, bind, control);
            need!((*e.ep).ops, FiOpsEp, cancel);
            need!((*e.ep).cm, FiOpsCm, getname);
            let bind = (*(*e.ep).fid.ops).bind.expect("checked");
            let control = (*(*e.ep).fid.ops).control.expect("checked");
            check(
                if scalable {
                    "fi_scalable_ep_bind(av)"
                } else {
                    "fi_ep_bind(av)"
                },
                bind(&mut (*e.ep).fid, &mut (*e.av).fid, 0),
            )?;
            let trywait_ok = {
                let f = (*e.fabric).ops;
                !f.is_null()
                    && holds((*f).size, offset_of!(FiOpsFabric, trywait))
                    && (*f).trywait.is_some()
            };
            let mut open_cq = |e: &mut Endpoint| -> Result<*mut FidCq, CallError> {
                let mut attr = FiCqAttr {
                    size: 0,
                    flags: 0,
                    format: FI_CQ_FORMAT_TAGGED,
                    wait_obj: if waits && trywait_ok {
                        FI_WAIT_FD
                    } else {
                        FI_WAIT_NONE
                    },
                    signaling_vector: 0,
                    wait_cond: 0,
                    wait_set: ptr::null_mut(),
                };
                let mut cq: *mut FidCq = ptr::null_mut();
                let open = dops.cq_open.expect("checked");
                let mut rc = open(e.domain, &mut attr, &mut cq, ptr::null_mut());
                if rc < 0 && attr.wait_obj != FI_WAIT_NONE {
                    // No such wait object here: queues without one.
                    waits = false;
                    e.wait_fds.clear();
                    attr.wait_obj = FI_WAIT_NONE;
                    cq = ptr::null_mut();
                    rc = open(e.domain, &mut attr, &mut cq, ptr::null_mut());
                }
                check("fi_cq_open", rc)?;
                // Kept in `lanes` at once so that drop closes it.
                e.lanes.push(Lane {
                    tx: ptr::null_mut(),
                    rx: ptr::null_mut(),
                    cq,
                });
                need!((*cq).fid.ops, FiOps, close);
                need!((*cq).ops, FiOpsCq, readfrom, readerr, strerror);
                if attr.wait_obj == FI_WAIT_FD {
                    let ops = (*cq).fid.ops;
                    let mut fd: c_int = -1;
                    let got = holds((*ops).size, offset_of!(FiOps, control))
                        && (*ops).control.is_some_and(|c| {
                            c(&mut (*cq).fid, FI_GETWAIT, (&mut fd as *mut c_int).cast()) == 0
                        })
                        && fd >= 0;
                    if got {
                        e.wait_fds.push(fd);
                    } else {
                        waits = false;
                        e.wait_fds.clear();
                    }
                }
                Ok(cq)
            };
            if scalable {
                need!((*e.ep).ops, FiOpsEp, tx_ctx, rx_ctx);
                let eops = &*(*e.ep).ops;
                for i in 0..contexts {
                    let cq = open_cq(&mut e)?;
                    let lane = e.lanes.len() - 1;
                    let mut tx: *mut FidEp = ptr::null_mut();
                    check(
                        "fi_tx_context",
                        eops.tx_ctx.expect("checked")(
                            e.ep,
                            i as c_int,
                            ptr::null_mut(),
                            &mut tx,
                            ptr::null_mut(),
                        ),
                    )?;
                    e.lanes[lane].tx = tx;
                    let mut rx: *mut FidEp = ptr::null_mut();
                    check(
                        "fi_rx_context",
                        eops.rx_ctx.expect("checked")(
                            e.ep,
                            i as c_int,
                            ptr::null_mut(),
                            &mut rx,
                            ptr::null_mut(),
                        ),
                    )?;
                    e.lanes[lane].rx = rx;
                    for (c, flags) in [(tx, FI_SEND), (rx, FI_RECV)] {
                        need!((*c).fid.ops, FiOps, close, bind, control);
                        need!((*c).ops, FiOpsEp, cancel);
                        let b = (*(*c).fid.ops).bind.expect("checked");
                        check("fi_ep_bind(cq)", b(&mut (*c).fid, &mut (*cq).fid, flags))?;
                        let ctl = (*(*c).fid.ops).control.expect("checked");
                        check(
                            "fi_enable(context)",
                            ctl(&mut (*c).fid, FI_ENABLE, ptr::null_mut()),
                        )?;
                    }
                }
            } else {
                let cq = open_cq(&mut e)?;
                check(
                    "fi_ep_bind(cq)",
                    bind(&mut (*e.ep).fid, &mut (*cq).fid, FI_SEND | FI_RECV),
                )?;
                let lane = e.lanes.len() - 1;
                e.lanes[lane].tx = e.ep;
                e.lanes[lane].rx = e.ep;
            }
            check(
                "fi_enable",
                control(&mut (*e.ep).fid, FI_ENABLE, ptr::null_mut()),
            )?;
            for l in &e.lanes {
                for c in [l.tx, l.rx] {
                    need!(
                        (*c).tagged,
                        FiOpsTagged,
                        recv,
                        recvmsg,
                        send,
                        inject,
                        senddata,
                        injectdata
                    );
                }
            }
        }
        Ok(e)
    }

    /// Number of context lanes (1 unless scalable).
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// `fi_getname`: this endpoint's address.
    pub fn name(&self) -> Result<Vec<u8>, CallError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `ep` is open; getname writes at most `len` bytes into
        // `buf` and the needed length into `len`.
        let rc = unsafe {
            let f = (*(*self.ep).cm).getname.expect("checked at open");
            f(&mut (*self.ep).fid, buf.as_mut_ptr().cast(), &mut len)
        };
        if rc == -FI_ETOOSMALL && len > buf.len() {
            buf.resize(len, 0);
            // SAFETY: as above, with a buffer of the length asked for.
            let rc = unsafe {
                let f = (*(*self.ep).cm).getname.expect("checked at open");
                f(&mut (*self.ep).fid, buf.as_mut_ptr().cast(), &mut len)
            };
            check("fi_getname", rc)?;
        } else {
            check("fi_getname", rc)?;
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// `fi_av_insert` of one address: its `fi_addr_t`.
    pub fn av_insert(&self, addr: &[u8]) -> Result<u64, CallError> {
        let mut out = FI_ADDR_UNSPEC;
        // SAFETY: `av` is open; the provider reads one address of its
        // format from `addr` (a business card's bytes, whose length was
        // checked against ours by the caller) and writes one fi_addr_t.
        let rc = unsafe {
            let f = (*(*self.av).ops).insert.expect("checked at open");
            f(
                self.av,
                addr.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        check("fi_av_insert", rc)?;
        if rc != 1 {
            return Err(CallError {
                call: "fi_av_insert (address not inserted)",
                code: 0,
            });
        }
        Ok(out)
    }

    /// The address of receive context `lane` of the peer at `addr`
    /// (`fi_rx_addr`; `addr` itself when not scalable).
    pub fn rx_addr(&self, addr: u64, lane: usize) -> u64 {
        if self.rx_ctx_bits == 0 {
            addr
        } else {
            ((lane as u64) << (64 - self.rx_ctx_bits)) | addr
        }
    }

    /// A new operation context; its address is stable until the endpoint
    /// is dropped. Returns its slab index.
    pub fn grow_contexts(&mut self) -> usize {
        let first = self.ctxs.len() * CHUNK;
        self.ctxs.push(
            (0..CHUNK)
                .map(|_| Ctx::new())
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        first
    }

    /// Contexts allocated.
    pub fn contexts(&self) -> usize {
        self.ctxs.len() * CHUNK
    }

    fn ctx(&self, i: usize) -> *mut c_void {
        self.ctxs[i / CHUNK][i % CHUNK].as_ptr()
    }

    /// The slab index of context address `addr` (a completion's), if it is
    /// one of ours.
    pub fn ctx_index(&self, addr: usize) -> Option<usize> {
        for (c, chunk) in self.ctxs.iter().enumerate() {
            let base = chunk.as_ptr() as usize;
            let end = base + CHUNK * size_of::<Ctx>();
            if (base..end).contains(&addr) && (addr - base) % size_of::<Ctx>() == 0 {
                return Some(c * CHUNK + (addr - base) / size_of::<Ctx>());
            }
        }
        None
    }

    /// `fi_tsend` (`data: Some`: `fi_tsenddata`) of `buf` on lane `lane`
    /// with context `ctx`.
    pub fn tsend(
        &self,
        lane: usize,
        buf: MemRegion,
        data: Option<u64>,
        dest: u64,
        tag: u64,
        ctx: usize,
    ) -> isize {
        let ep = self.lanes[lane].tx;
        let c = self.ctx(ctx);
        // SAFETY: the transmit endpoint is open and its tagged ops checked;
        // `buf` stays valid until the send completes (MemRegion's contract)
        // and `c` is a context of this endpoint's slab (stable while it
        // lives); desc is NULL (no FI_MR_LOCAL asked for).
        unsafe {
            let t = &*(*ep).tagged;
            match data {
                None => t.send.expect("checked at open")(
                    ep,
                    buf.addr() as *const c_void,
                    buf.len(),
                    ptr::null_mut(),
                    dest,
                    tag,
                    c,
                ),
                Some(d) => t.senddata.expect("checked at open")(
                    ep,
                    buf.addr() as *const c_void,
                    buf.len(),
                    ptr::null_mut(),
                    d,
                    dest,
                    tag,
                    c,
                ),
            }
        }
    }

    /// `fi_tinject` (`data: Some`: `fi_tinjectdata`) of `buf` on lane
    /// `lane`: the provider copies the bytes before it returns 0, and no
    /// completion follows. For messages of at most the provider's
    /// `inject_size` bytes.
    pub fn tinject(
        &self,
        lane: usize,
        buf: MemRegion,
        data: Option<u64>,
        dest: u64,
        tag: u64,
    ) -> isize {
        let ep = self.lanes[lane].tx;
        // SAFETY: the transmit endpoint is open and its tagged ops checked;
        // `buf` is valid for the call (MemRegion's contract) and an inject
        // reads it only inside the call; no context is kept.
        unsafe {
            let t = &*(*ep).tagged;
            match data {
                None => t.inject.expect("checked at open")(
                    ep,
                    buf.addr() as *const c_void,
                    buf.len(),
                    dest,
                    tag,
                ),
                Some(d) => t.injectdata.expect("checked at open")(
                    ep,
                    buf.addr() as *const c_void,
                    buf.len(),
                    d,
                    dest,
                    tag,
                ),
            }
        }
    }

    /// `fi_tinject` of an empty message (no completion).
    pub fn tinject_empty(&self, lane: usize, dest: u64, tag: u64) -> isize {
        let ep = self.lanes[lane].tx;
        // SAFETY: the transmit endpoint is open; an empty inject reads no
        // memory and keeps no context.
        unsafe { (*(*ep).tagged).inject.expect("checked at open")(ep, ptr::null(), 0, dest, tag) }
    }

    /// `fi_trecv` into `buf` on lane `lane`.
    pub fn trecv(
        &self,
        lane: usize,
        buf: MemRegion,
        src: u64,
        tag: u64,
        ignore: u64,
        ctx: usize,
    ) -> isize {
        let ep = self.lanes[lane].rx;
        let c = self.ctx(ctx);
        // SAFETY: the receive endpoint is open; `buf` stays valid and
        // untouched until the receive completes (MemRegion's contract);
        // `c` is a context of this endpoint's slab.
        unsafe {
            (*(*ep).tagged).recv.expect("checked at open")(
                ep,
                buf.addr() as *mut c_void,
                buf.len(),
                ptr::null_mut(),
                src,
                tag,
                ignore,
                c,
            )
        }
    }

    /// `fi_trecvmsg` with `flags` (`FI_PEEK`, `FI_CLAIM`), into `buf` if
    /// given.
    #[allow(clippy::too_many_arguments)]
    pub fn trecvmsg(
        &self,
        lane: usize,
        buf: Option<MemRegion>,
        src: u64,
        tag: u64,
        ignore: u64,
        ctx: usize,
        flags: u64,
    ) -> isize {
        let ep = self.lanes[lane].rx;
        let iov = buf.map(|b| Iovec {
            iov_base: b.addr() as *mut c_void,
            iov_len: b.len(),
        });
        let mut desc: *mut c_void = ptr::null_mut();
        let msg = FiMsgTagged {
            msg_iov: iov.as_ref().map_or(ptr::null(), |i| i as *const Iovec),
            desc: &mut desc,
            iov_count: usize::from(iov.is_some()),
            addr: src,
            tag,
            ignore,
            context: self.ctx(ctx),
            data: 0,
        };
        // SAFETY: the receive endpoint is open; `msg` and the iovec live
        // across the call (the provider copies them); the buffer stays valid
        // until the receive completes (MemRegion's contract); the context is
        // of this endpoint's slab.
        unsafe { (*(*ep).tagged).recvmsg.expect("checked at open")(ep, &msg, flags) }
    }

    /// `fi_cancel` of the receive with context `ctx` on lane `lane`.
    pub fn cancel(&self, lane: usize, ctx: usize) -> isize {
        let ep = self.lanes[lane].rx;
        // SAFETY: the receive endpoint is open and its ops checked; cancel
        // only looks the context up.
        unsafe { (*(*ep).ops).cancel.expect("checked at open")(&mut (*ep).fid, self.ctx(ctx)) }
    }

    /// `fi_cq_readfrom` of lane `lane`'s queue into `entries` and `src`
    /// (same length): the count read, or a negative code (`-FI_EAGAIN`
    /// empty, `-FI_EAVAIL` an error entry waits).
    pub fn cq_readfrom(&self, lane: usize, entries: &mut [CqEntry], src: &mut [u64]) -> isize {
        let cq = self.lanes[lane].cq;
        let n = entries.len().min(src.len());
        // SAFETY: the queue is open with FI_CQ_FORMAT_TAGGED, so each entry
        // written is a `CqEntry`; both buffers hold `n` elements.
        unsafe {
            (*(*cq).ops).readfrom.expect("checked at open")(
                cq,
                entries.as_mut_ptr().cast(),
                n,
                src.as_mut_ptr(),
            )
        }
    }

    /// `fi_cq_readerr` of lane `lane`'s queue.
    pub fn cq_readerr(&self, lane: usize) -> Option<CqError> {
        let cq = self.lanes[lane].cq;
        // SAFETY: a zeroed err entry (err_data NULL, size 0: the provider
        // keeps its own error data) is valid input; the queue is open; the
        // provider's strerror writes at most `buf.len()` bytes and returns
        // a NUL-terminated string (into `buf` or its own).
        unsafe {
            let mut e: FiCqErrEntry = std::mem::zeroed();
            let rc = (*(*cq).ops).readerr.expect("checked at open")(cq, &mut e, 0);
            if rc <= 0 {
                return None;
            }
            let mut buf = [0 as c_char; 256];
            let s = (*(*cq).ops).strerror.expect("checked at open")(
                cq,
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            );
            let prov = if s.is_null() {
                String::new()
            } else {
                CStr::from_ptr(s).to_string_lossy().into_owned()
            };
            Some(CqError {
                context: e.op_context as usize,
                len: e.len,
                data: e.data,
                tag: e.tag,
                olen: e.olen,
                err: e.err,
                prov_msg: prov,
            })
        }
    }

    /// The library.
    pub fn lib(&self) -> &Lib {
        &self.lib
    }
}

/// An error completion (`struct fi_cq_err_entry`, copied out).
#[derive(Clone, Debug)]
pub struct CqError {
    /// The operation's context address.
    pub context: usize,
    /// Bytes delivered.
    pub len: usize,
    /// Remote CQ data.
    pub data: u64,
    /// The message's tag.
    pub tag: u64,
    /// Bytes that did not fit (`FI_ETRUNC`).
    pub olen: usize,
    /// The error (positive `FI_E*`).
    pub err: c_int,
    /// The provider's description of it.
    pub prov_msg: String,
}

/// What a thread sleeps on until the provider has a completion: the wait
/// descriptors of the endpoint's queues (`FI_WAIT_FD`) and `fi_trywait`,
/// which says whether sleeping on them is safe now (libfabric's
/// `fi_trywait(3)` protocol: read the queues until empty, `fi_trywait`, then
/// block on the descriptors only if it succeeded).
pub struct CqBell {
    /// The library whose `trywait` the fabric's ops point into, held while
    /// the bell is.
    _lib: Arc<Lib>,
    fabric: *mut FidFabric,
    cqs: Vec<*mut Fid>,
    fds: Vec<c_int>,
}

// SAFETY: the pointers name the owner's fabric and queues, used only by
// `trywait`, which the owner calls with the same serialisation as every
// other call on its endpoint (under its lock, before closing it); `wait`
// touches only the descriptors (a `poll`).
unsafe impl Send for CqBell {}
// SAFETY: as for Send: `&self` methods either are serialised by the
// owner (`trywait`) or only poll file descriptors (`wait`).
unsafe impl Sync for CqBell {}

impl CqBell {
    /// `fi_trywait` on every queue: whether a thread may now block in
    /// [`CqBell::wait`] (false: completions are pending, read them first).
    /// Must be called with the endpoint's other calls serialised, after the
    /// last read of the queues and before the endpoint is closed.
    pub fn trywait(&self) -> bool {
        let mut fids = self.cqs.clone();
        // SAFETY: the fabric and queues are live (the caller's contract);
        // trywait was checked present when the queues were opened with
        // their wait objects; `fids` outlives the call.
        unsafe {
            let f = (*(*self.fabric).ops).trywait.expect("checked at open");
            f(self.fabric, fids.as_mut_ptr(), fids.len() as c_int) == 0
        }
    }

    /// Blocks until a queue's descriptor is readable or `timeout` passes:
    /// whether one was.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        use std::os::fd::BorrowedFd;
        let mut pfds: Vec<PollFd<'_>> = self
            .fds
            .iter()
            .map(|&fd| {
                // SAFETY: each descriptor is a queue's wait object, open
                // until the endpoint closes, which the owner does not do
                // while a thread of its own sleeps here (finalize ends the
                // waits first).
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                PollFd::from_borrowed_fd(fd, PollFlags::IN)
            })
            .collect();
        let t = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        matches!(poll(&mut pfds, Some(&t)), Ok(n) if n > 0)
    }
}

impl Endpoint {
    /// The endpoint's [`CqBell`], when every queue has a wait descriptor.
    pub fn bell(&self) -> Option<CqBell> {
        if self.wait_fds.is_empty() || self.wait_fds.len() != self.lanes.len() {
            return None;
        }
        Some(CqBell {
            _lib: self.lib.clone(),
            fabric: self.fabric,
            // SAFETY: each lane's queue is live (the endpoint is open).
            cqs: self
                .lanes
                .iter()
                .map(|l| unsafe { &mut (*l.cq).fid as *mut Fid })
                .collect(),
            fds: self.wait_fds.clone(),
        })
    }

    /// Closes every object of the endpoint (the provider then releases what
    /// it holds: connections, shared-memory segments); the endpoint must not
    /// be used for communication afterwards (its owner refuses every
    /// operation once closed). Closing twice does nothing.
    pub fn close(&mut self) {
        let close = |f: *mut Fid| {
            if f.is_null() {
                return;
            }
            // SAFETY: `f` is an object opened here and not yet closed; its
            // fi_ops (with close) were checked at open, or the open failed
            // before any other use, in which case close is still the first
            // entry every provider fills.
            unsafe {
                if let Some(c) = (*(*f).ops).close {
                    c(f);
                }
            }
        };
        // Contexts before the endpoint, the endpoint before its queues and
        // address vector, those before the domain, the domain before the
        // fabric.
        for l in &self.lanes {
            if !l.tx.is_null() && l.tx != self.ep {
                // SAFETY: a live context endpoint.
                close(unsafe { &mut (*l.tx).fid });
            }
            if !l.rx.is_null() && l.rx != self.ep {
                // SAFETY: a live context endpoint.
                close(unsafe { &mut (*l.rx).fid });
            }
        }
        if !self.ep.is_null() {
            // SAFETY: the live endpoint.
            close(unsafe { &mut (*self.ep).fid });
        }
        for l in &self.lanes {
            if !l.cq.is_null() {
                // SAFETY: a live queue.
                close(unsafe { &mut (*l.cq).fid });
            }
        }
        if !self.av.is_null() {
            // SAFETY: the live address vector.
            close(unsafe { &mut (*self.av).fid });
        }
        if !self.domain.is_null() {
            // SAFETY: the live domain.
            close(unsafe { &mut (*self.domain).fid });
        }
        if !self.fabric.is_null() {
            // SAFETY: the live fabric.
            close(unsafe { &mut (*self.fabric).fid });
        }
        // Nothing is closed twice.
        self.lanes.clear();
        self.wait_fds.clear();
        self.ep = std::ptr::null_mut();
        self.av = std::ptr::null_mut();
        self.domain = std::ptr::null_mut();
        self.fabric = std::ptr::null_mut();
        // The contexts (`ctxs`) are freed with the endpoint, once nothing
        // refers to them.
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The structs' sizes and field offsets against the C compiler's, on
    /// the installed headers (skipped, saying why, without a C compiler
    /// or libfabric's headers).
    #[test]
    fn layouts_match_the_c_headers() {
        let dir = std::env::temp_dir().join(format!("oxmpi-ofi-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let checks: Vec<(&str, &str, usize)> = vec![
            ("struct fid", "", size_of::<Fid>()),
            ("struct fi_ops", "", size_of::<FiOps>()),
            ("struct fi_tx_attr", "", size_of::<FiTxAttr>()),
            ("struct fi_rx_attr", "", size_of::<FiRxAttr>()),
            ("struct fi_ep_attr", "", size_of::<FiEpAttr>()),
            (
                "struct fi_ep_attr",
                "mem_tag_format",
                offset_of!(FiEpAttr, mem_tag_format),
            ),
            ("struct fi_domain_attr", "", size_of::<FiDomainAttr>()),
            (
                "struct fi_domain_attr",
                "cq_data_size",
                offset_of!(FiDomainAttr, cq_data_size),
            ),
            (
                "struct fi_domain_attr",
                "max_ep_tx_ctx",
                offset_of!(FiDomainAttr, max_ep_tx_ctx),
            ),
            ("struct fi_fabric_attr", "", size_of::<FiFabricAttr>()),
            (
                "struct fi_fabric_attr",
                "prov_name",
                offset_of!(FiFabricAttr, prov_name),
            ),
            ("struct fi_info", "", size_of::<FiInfo>()),
            (
                "struct fi_info",
                "fabric_attr",
                offset_of!(FiInfo, fabric_attr),
            ),
            ("struct fid_fabric", "", size_of::<FidFabric>()),
            ("struct fi_ops_fabric", "", size_of::<FiOpsFabric>()),
            ("struct fid_domain", "", size_of::<FidDomain>()),
            ("struct fi_ops_domain", "", size_of::<FiOpsDomain>()),
            (
                "struct fi_ops_domain",
                "scalable_ep",
                offset_of!(FiOpsDomain, scalable_ep),
            ),
            ("struct fi_av_attr", "", size_of::<FiAvAttr>()),
            ("struct fid_av", "", size_of::<FidAv>()),
            ("struct fi_ops_av", "", size_of::<FiOpsAv>()),
            ("struct fi_cq_attr", "", size_of::<FiCqAttr>()),
            ("struct fid_cq", "", size_of::<FidCq>()),
            ("struct fi_ops_cq", "", size_of::<FiOpsCq>()),
            (
                "struct fi_ops_cq",
                "strerror",
                offset_of!(FiOpsCq, strerror),
            ),
            ("struct fi_cq_tagged_entry", "", size_of::<CqEntry>()),
            ("struct fi_cq_tagged_entry", "tag", offset_of!(CqEntry, tag)),
            ("struct fi_cq_err_entry", "", size_of::<FiCqErrEntry>()),
            (
                "struct fi_cq_err_entry",
                "olen",
                offset_of!(FiCqErrEntry, olen),
            ),
            (
                "struct fi_cq_err_entry",
                "prov_errno",
                offset_of!(FiCqErrEntry, prov_errno),
            ),
            ("struct fid_ep", "", size_of::<FidEp>()),
            ("struct fid_ep", "tagged", offset_of!(FidEp, tagged)),
            ("struct fi_ops_ep", "", size_of::<FiOpsEp>()),
            ("struct fi_ops_cm", "", size_of::<FiOpsCm>()),
            ("struct fi_ops_cm", "getname", offset_of!(FiOpsCm, getname)),
            ("struct fi_ops_tagged", "", size_of::<FiOpsTagged>()),
            (
                "struct fi_ops_tagged",
                "senddata",
                offset_of!(FiOpsTagged, senddata),
            ),
            ("struct fi_msg_tagged", "", size_of::<FiMsgTagged>()),
            (
                "struct fi_msg_tagged",
                "data",
                offset_of!(FiMsgTagged, data),
            ),
            ("struct fi_context2", "", size_of::<Ctx>()),
        ];
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n\
             #include <rdma/fi_domain.h>\n#include <rdma/fi_endpoint.h>\n\
             #include <rdma/fi_eq.h>\n#include <rdma/fi_tagged.h>\n#include <rdma/fi_cm.h>\n\
             int main(void) {\n",
        );
        for (ty, field, _) in &checks {
            if field.is_empty() {
                c += &format!("printf(\"%zu\\n\", sizeof({ty}));\n");
            } else {
                c += &format!("printf(\"%zu\\n\", offsetof({ty}, {field}));\n");
            }
        }
        c += "return 0; }\n";
        let src = dir.join("layout.c");
        let exe = dir.join("layout");
        std::fs::write(&src, c).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = std::process::Command::new(&cc)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output();
        let built =
            match built {
                Ok(o) if o.status.success() => o,
                Ok(o) => {
                    eprintln!(
                    "skipped: {cc} could not build the layout probe (libfabric-dev missing?): {}",
                    String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("")
                );
                    return;
                }
                Err(e) => {
                    eprintln!("skipped: no C compiler ({cc}: {e})");
                    return;
                }
            };
        drop(built);
        let out = std::process::Command::new(&exe).output().unwrap();
        let got: Vec<usize> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert_eq!(got.len(), checks.len());
        for ((ty, field, rust), c) in checks.iter().zip(got) {
            assert_eq!(*rust, c, "{ty} {field}: Rust {rust}, C {c}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
