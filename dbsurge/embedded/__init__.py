"""Embedded servers dbsurge starts and stops itself on 127.0.0.1: PostgreSQL, the MongoDB-wire server, moto's DynamoDB, Apache Cassandra on Java 17."""
