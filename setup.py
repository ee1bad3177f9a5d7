"""Builds the C extension streamplane._native (everything else is declared in pyproject.toml)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamplane._native",
            sources=[
                "native/src/module.c",
                "native/src/decode.c",
                "native/src/codecs.c",
                "native/src/crc32c.c",
                "native/src/lanes.c",
                "native/src/where.c",
            ],
            depends=["native/src/spdecode.h", "native/src/lanes.h"],
            libraries=["zstd", "z", "lz4", "snappy"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        )
    ]
)
