! test_fzclient.f90 - the fzclient module's calls beyond the example.  Run
! as `test_fzclient_fortran daemon` against the fzd at $FZD_SOCKET, and as
! `test_fzclient_fortran embedded` where no daemon answers, when every job
! must run in process with the same results: a real(8) 3-D array with a
! pointwise relative bound (Fortran's column-major extents reach fzd slowest
! first, so the archive's header must name them reversed), the exact
! lossless mode, decompressions into arrays of the wrong size (FZ_ESIZE,
! smaller and larger), an archive buffer too small (FZ_ENOSPC with a
! message), an archive compressed one way decoded the other, and a refused
! connection (FZ_ECONNREFUSED with its reason), which a program that
! requires the daemon gets from every call.  Exits 1 at the first failed
! check.
program test_fzclient
  use, intrinsic :: iso_c_binding
  use fzclient
  implicit none
  integer, parameter :: nx = 40, ny = 30, nz = 20
  real(c_double), allocatable :: a(:, :, :), b(:, :, :), small(:), large(:)
  integer(c_int8_t), allocatable :: arc(:), tiny(:), arc2(:)
  integer(c_size_t) :: bound, n, n2
  real(c_double) :: eb_abs
  type(c_ptr) :: c, none
  character(len=256) :: msg
  character(len=16) :: mode
  logical :: daemon
  integer :: st, i, j, k

  call get_command_argument(1, mode)
  call check(mode == 'daemon' .or. mode == 'embedded', 'usage: test_fzclient_fortran daemon|embedded')
  daemon = mode == 'daemon'
  allocate(a(nx, ny, nz), b(nx, ny, nz), small(10), large(nx * ny * nz + 1), tiny(8))
  do k = 1, nz
    do j = 1, ny
      do i = 1, nx
        a(i, j, k) = 1.0d0 + sin(0.1d0 * i) * cos(0.2d0 * j) + 0.01d0 * k
      end do
    end do
  end do
  st = fz_client_connect_f(c, '', msg)
  if (daemon) then
    call check(st == 0, 'connect: ' // msg)
  else
    call check(st == -111 .and. .not. c_associated(c), 'no daemon must answer here: ' // msg)
  end if

  call check(fz_compress_bound_f('f64', shape(a), '', 1.0d-4, 'pwrel', bound) == 0, 'bound')
  allocate(arc(bound), arc2(bound))
  st = fz_compress_f64(c, a, shape(a), '', 1.0d-4, 'pwrel', arc, n, eb_abs)
  call check(st == 0, 'compress f64 pwrel')
  call check(fz_in_process_f() .neqv. daemon, 'compressed where it should be')
  st = fz_decompress_f64(c, arc, n, b, size(b))
  call check(st == 0, 'decompress f64')
  call check(fz_in_process_f() .neqv. daemon, 'decompressed where it should be')
  call check(all(abs(a - b) <= 1.0d-4 * abs(a)), 'pwrel bound kept')
  call check(any(a /= b), 'lossy: something changed')
  call check(header_dims_reversed(arc, n), 'the header names (nz, ny, nx)')

  ! The other side makes the same archive, byte for byte, and decodes it.
  st = fz_compress_f64(c_null_ptr, a, shape(a), '', 1.0d-4, 'pwrel', arc2, n2, eb_abs)
  call check(st == 0 .and. n2 == n, 'compress in process')
  call check(all(arc2(1:n) == arc(1:n)), 'in process and the daemon make one archive')

  st = fz_decompress_f64(c, arc, n, small, size(small))
  call check(st == -4020, 'decompress into 10 elements gives FZ_ESIZE')
  call fz_client_errmsg_f(c, msg)
  call check(index(msg, 'the archive holds 192000 bytes of f64; the array has 80 bytes') > 0, &
             'ESIZE message: ' // msg)
  st = fz_decompress_f64(c, arc, n, large, size(large))
  call check(st == -4020, 'decompress into one element more gives FZ_ESIZE')

  st = fz_compress_f64(c, a, shape(a), 'lossless', 0.0d0, '', arc, n, eb_abs)
  call check(st == 0, 'compress lossless')
  st = fz_decompress_f64(c, arc, n, b, size(b))
  call check(st == 0 .and. all(a == b), 'lossless round trip is exact')

  st = fz_compress_f64(c, a, shape(a), '', 1.0d-3, 'rel', tiny, n, eb_abs)
  call check(st == -28, 'an 8-byte archive buffer gives FZ_ENOSPC')
  call fz_client_errmsg_f(c, msg)
  call check(len_trim(msg) > 0, 'errmsg explains ENOSPC')
  call fz_client_close_f(c)
  call check(.not. c_associated(c), 'close clears the handle')

  st = fz_client_connect_f(none, 'unix:/nonexistent/fzd.sock', msg)
  call check(st == -111, 'connect to nothing gives FZ_ECONNREFUSED')
  call check(index(msg, '/nonexistent/fzd.sock') > 0, 'its message names the socket: ' // msg)
  call fz_strerror_f(st, msg)
  call check(trim(msg) == 'connection refused', 'fz_strerror_f: ' // msg)

  ! Requiring the daemon: no call runs in process any more.
  call fz_require_daemon_f(.true.)
  st = fz_compress_f64(none, a, shape(a), 'lossless', 0.0d0, '', arc, n, eb_abs)
  call check(st == -111, 'required daemon: compress without one gives FZ_ECONNREFUSED')
  call fz_client_errmsg_f(none, msg)
  call check(index(msg, 'required') > 0, 'required daemon: the message says so: ' // msg)
  st = fz_decompress_f64(none, arc2, n2, b, size(b))
  call check(st == -111, 'required daemon: decompress without one gives FZ_ECONNREFUSED')
  call fz_require_daemon_f(.false.)
  st = fz_decompress_f64(none, arc2, n2, b, size(b))
  call check(st == 0 .and. fz_in_process_f(), 'not required again: decompress in process')
  print '(3a)', 'test_fzclient: all checks passed (', trim(mode), ')'
  deallocate(a, b, small, large, tiny, arc, arc2)

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(2a)', 'test_fzclient: FAILED: ', trim(what)
      stop 1
    end if
  end subroutine

  ! The archive's dims (docs/format.md) read with fz_client_archive_info
  ! through the C helper of this test.
  logical function header_dims_reversed(arc, n)
    integer(c_int8_t), intent(in), target :: arc(:)
    integer(c_size_t), intent(in) :: n
    interface
      integer(c_int) function archive_dims(arc, len, dims) bind(C, name='test_archive_dims')
        import :: c_int, c_ptr, c_size_t, c_int64_t
        type(c_ptr), value :: arc
        integer(c_size_t), value :: len
        integer(c_int64_t), intent(out) :: dims(4)
      end function
    end interface
    integer(c_int64_t) :: d(4)
    header_dims_reversed = archive_dims(c_loc(arc), n, d) == 3 .and. d(1) == nz .and. &
                           d(2) == ny .and. d(3) == nx
  end function
end program test_fzclient
