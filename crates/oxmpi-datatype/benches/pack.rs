//! Packing throughput: 1 MiB of data laid out as a vector of 8-byte blocks
//! at a 16-byte stride (`MPI_Type_vector(131072, 1, 2, MPI_DOUBLE)`), against
//! a plain 1 MiB memcpy. Criterion reports the throughput of the packed
//! bytes.
// criterion_group!/criterion_main! generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use oxmpi_datatype::{Convertor, Datatype};

const MIB: usize = 1 << 20;

fn pack(c: &mut Criterion) {
    let src: Vec<u8> = (0..2 * MIB).map(|i| i as u8).collect();
    let mut out = vec![0u8; MIB];
    let mut dst = vec![0u8; 2 * MIB];

    // 131072 blocks of 8 bytes, stride 16: 1 MiB of data in a 2 MiB buffer.
    let vec8 = Datatype::vector((MIB / 8) as isize, 1, 2, &Datatype::f64()).unwrap();
    let conv8 = Convertor::new(&vec8, 1).unwrap();
    // The same bytes as 131072 elements of a resized f64 (extent 16).
    let resized = Datatype::resized(&Datatype::f64(), 0, 16).unwrap();
    let conv_count = Convertor::new(&resized, MIB / 8).unwrap();
    // 64-byte blocks, stride 128.
    let vec64 = Datatype::vector((MIB / 64) as isize, 8, 16, &Datatype::f64()).unwrap();
    let conv64 = Convertor::new(&vec64, 1).unwrap();
    // A struct {f64, i32, i16} (14 of 16 bytes), 1 MiB / 14 elements.
    let st = Datatype::structured(
        &[1, 1, 1],
        &[0, 8, 12],
        &[Datatype::f64(), Datatype::i32(), Datatype::i16()],
    )
    .unwrap();
    let conv_st = Convertor::new(&st, MIB / 14).unwrap();

    let mut g = c.benchmark_group("pack_1MiB");
    g.throughput(Throughput::Bytes(MIB as u64));
    g.bench_function("memcpy", |b| {
        b.iter(|| out.copy_from_slice(black_box(&src[..MIB])))
    });
    g.bench_function("vector_b8_s16", |b| {
        b.iter(|| conv8.pack(black_box(&src), 0, 0, &mut out).unwrap())
    });
    g.bench_function("vector_b8_s16_64KiB_fragments", |b| {
        b.iter(|| {
            for (k, chunk) in out.chunks_mut(64 * 1024).enumerate() {
                conv8
                    .pack(black_box(&src), 0, k * 64 * 1024, chunk)
                    .unwrap();
            }
        })
    });
    g.bench_function("resized_f64_count_131072", |b| {
        b.iter(|| conv_count.pack(black_box(&src), 0, 0, &mut out).unwrap())
    });
    g.bench_function("vector_b64_s128", |b| {
        b.iter(|| conv64.pack(black_box(&src), 0, 0, &mut out).unwrap())
    });
    g.bench_function("unpack_vector_b8_s16", |b| {
        b.iter(|| conv8.unpack(&mut dst, 0, 0, black_box(&out)).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("pack_struct");
    g.throughput(Throughput::Bytes(conv_st.packed_size() as u64));
    g.bench_function("struct_f64_i32_i16", |b| {
        b.iter(|| conv_st.pack(black_box(&src), 0, 0, &mut out).unwrap())
    });
    g.finish();
}

criterion_group!(benches, pack);
criterion_main!(benches);
