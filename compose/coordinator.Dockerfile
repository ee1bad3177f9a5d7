# The coordinator image for compose/: streamplane with the FoundationDB client library.
FROM python:3.11-slim-bookworm
ARG FDB_VERSION=7.3.63
RUN apt-get update && apt-get install -y --no-install-recommends build-essential libzstd-dev liblz4-dev \
        libsnappy-dev zlib1g-dev curl ca-certificates \
    && curl -fsSLo /tmp/fdb.deb \
        "https://github.com/apple/foundationdb/releases/download/${FDB_VERSION}/foundationdb-clients_${FDB_VERSION}-1_amd64.deb" \
    && dpkg -i /tmp/fdb.deb && rm /tmp/fdb.deb && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN pip install --no-cache-dir /src
EXPOSE 7400
CMD ["streamplane", "coordinator", "--host", "0.0.0.0", "--port", "7400"]
