// The Catena client SDK: everything a program needs to publish and
// subscribe. Public headers, the standard library only (no Thrift, Boost,
// wire or fabric types); libcatena.so exports what they declare (CATENA_API)
// and hides the rest.
//
//   #include <catena/client.hpp>
//   auto routes = catena::connect("h1:7400,h2:7400");            // connect.hpp
//   auto pub = catena::Publisher::create(**routes, "orders");    // publisher.hpp
//   auto sub = catena::Subscriber::create(**routes, "orders");   // subscriber.hpp
//   auto admin = catena::Admin::connect("h1:7400");               // admin.hpp: channels
//
// Errors are client::ErrorCode / client::Error (error.hpp), results
// client::Result<T> (catena::Expected).
#pragma once

#include <catena/broker/client_event.hpp>
#include <catena/broker/group_subscriber.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/client/admin.hpp>
#include <catena/client/connect.hpp>
#include <catena/client/error.hpp>
#include <catena/client/headers.hpp>
#include <catena/client/routes.hpp>
#include <catena/version.hpp>
