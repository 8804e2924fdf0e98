"""Build the one compiled piece: formats._native, the hot loops over record batches."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "formats._native",
            sources=["formats/_native.c"],
            extra_compile_args=["-O3", "-std=c11"],
        )
    ]
)
